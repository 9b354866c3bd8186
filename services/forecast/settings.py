"""The forecast service's settings (`gfs serve forecast`, services/forecast/app.py): the platform's
plus the stream's own, from the environment (FORECAST_*; the clock also from GFS_FORECAST_CLOCK)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, field_validator

from gfs.schemas.clock import CLOCK_KEY
from gfs.services.forecast.task_expiry import DEFAULT_KEEP_S
from gfs.services.platform.paths import state_dir
from gfs.services.platform.settings import PlatformSettings

FAUST_COMMIT_INTERVAL_S = 2.8  # faust's own default of broker_commit_interval
SHIPPED_ARTIFACT = Path(__file__).resolve().parent / "model" / "lstm-observed"


class ForecastServiceSettings(PlatformSettings):
    forecast_app_id: str = "gfs-forecast"
    forecast_artifact: Path | None = SHIPPED_ARTIFACT  # None: persistence only (flagged)
    forecast_store: str = "rocksdb://"  # durable tables; "memory://" keeps them in the changelog only
    # Faust's RocksDB tables (rebuilt from their changelog topics when lost). Default: <state>/forecast,
    # the per-user state folder (services/platform/paths.py), not the checkout. Env FORECAST_DATADIR.
    forecast_datadir: Path = Field(default_factory=lambda: state_dir("forecast"))
    forecast_tick_s: float = 60.0
    forecast_history_hours: int = 14 * 24
    forecast_torch_threads: int = 1
    # Wall clock: a task event whose occurred_at is more than this ahead of the host's clock is
    # dead-lettered (pipeline.check_not_ahead). On the topic clock the driver's events run ahead
    # of the last tick by design, so the check is off there.
    forecast_max_ahead_s: float = Field(default=300.0, gt=0)
    forecast_refit_hour: int = 3  # UTC hour of the daily warm-start refit
    forecast_partitions: int = 6  # the source topics' partition count
    # at_least_once: a redelivered task event is a no-op (the task record says whether it counts).
    # exactly_once would commit changelogs, re-keyed records, forecasts and offsets in one Kafka
    # transaction, but a worker killed mid-transaction then blocks every read_committed consumer
    # of gfs.forecasts (the quota service) until the broker times the transaction out.
    forecast_processing_guarantee: str = "at_least_once"
    forecast_web_port: int = 6066  # /metrics, /healthz, /readyz (Faust's web server); 0: none
    forecast_web_host: str | None = None  # None: GFS_HTTP_HOST (loopback by default)
    # "wall": the timer ticks pools on the host's clock. "topic": ClockTick ADVANCEs on
    # gfs.control.clock are the only ticks (sim/live parity). Env GFS_FORECAST_CLOCK.
    forecast_clock: Literal["wall", "topic"] = Field(
        default="wall", validation_alias=AliasChoices("forecast_clock", "gfs_forecast_clock")
    )
    # Topic clock: the clock followed (ClockTick.clock, the Kafka key); ticks of other clocks on
    # the topic are ignored, so a test's private clock never moves another run's stream.
    forecast_clock_name: str = Field(
        default=CLOCK_KEY,
        min_length=1,
        validation_alias=AliasChoices("forecast_clock_name", "gfs_forecast_clock_name"),
    )
    # How often Faust commits consumed offsets; None: Faust's default (2.8 s) on the wall clock,
    # 0.1 s on the topic clock, where a driver waits for committed offsets to reach the end.
    forecast_commit_interval_s: float | None = Field(default=None, gt=0)
    # A new pool's history starts at this hour (zeros before its first completed hour), as the
    # simulator's series start at the trace's first hour; None: at its first completed hour.
    forecast_history_origin: datetime | None = None
    # An ended task's record is deleted this long after the stream processed its ending
    # (task_expiry.py): the redelivery window it protects. Env FORECAST_TASK_KEEP_S.
    forecast_task_keep_s: float = Field(default=DEFAULT_KEEP_S, ge=0)
    # The series forecast (pipeline.py): "servable", the levels the preemption service publishes
    # on gfs.pools.demand (issue 35, the core's default), or "observed", running plus queued HP
    # counted from the task events (issue 10). It must be the quota policy's `demand_source`.
    forecast_demand_source: Literal["servable", "observed"] = "servable"

    @field_validator("forecast_artifact", mode="before")
    @classmethod
    def _blank_artifact_is_none(cls, value: object) -> object:
        # FORECAST_ARTIFACT= (set but empty) means persistence only, not the current directory.
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("forecast_history_origin", mode="after")
    @classmethod
    def _origin_in_utc(cls, value: datetime | None) -> datetime | None:
        # Without an offset it is UTC (sim time is), whatever the host's time zone.
        return value if value is None or value.tzinfo is not None else value.replace(tzinfo=UTC)

    @property
    def topic_clock(self) -> bool:
        return self.forecast_clock == "topic"

    @property
    def commit_interval_s(self) -> float:
        if self.forecast_commit_interval_s is not None:
            return self.forecast_commit_interval_s
        return 0.1 if self.topic_clock else FAUST_COMMIT_INTERVAL_S
