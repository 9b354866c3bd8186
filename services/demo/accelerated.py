"""`gfs demo live` on the accelerated clock: the services' settings on the run's clock, the clock's
driver over the sample, and the gate that holds it while a forecast lags (services/demo/live.py's
module doc; docs/services.md, "The demo's clock")."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

from gfs.services.demo.clock import ClockState, run_clock
from gfs.services.platform.settings import PlatformSettings

# Accelerated clock: t = 0 of the sample is this instant (a midnight, so the sample's hours are the
# hours of the day the LSTM's calendar features see); one tick per TICK_S wall seconds; the quota
# is computed every STATUS_S seconds of the sample, as the simulator refreshes it.
BASE_S = 1767225600.0  # 2026-01-01T00:00:00Z
TICK_S = 0.5
STATUS_S = 300.0
HISTORY_DAYS = 9  # >= the LSTM's 168 h lookback + its 24 calibration hours + its 4 h horizon
# The clock waits while the forecast behind a pool's quota is older than this (services/demo/clock.py).
MAX_FORECAST_AGE_S = 3 * 3600.0


def clock_env(name: str) -> dict[str, dict[str, str]]:
    """Each process's settings on the run's accelerated clock (module doc), by role. Sample time
    runs `speed` times the wall, so what the wall-clock defaults give in wall seconds (a grace, an
    ack's margin, a command's age) is stretched to what a wall second or two is in sample time."""
    origin = datetime.fromtimestamp(BASE_S, UTC) - timedelta(days=HISTORY_DAYS)
    return {
        "forecast": {
            "FORECAST_CLOCK": "topic",
            "FORECAST_CLOCK_NAME": name,
            "FORECAST_HISTORY_ORIGIN": origin.isoformat(),
        },
        # A quota is computed at every STATUS tick (STATUS_S) and stays in force two refreshes: at
        # 480x the wall seconds from a status to its quota at the scheduler would outlast 2 x 300 s
        # of the sample and freeze spot at what runs (quota_expired). Stretched to an hour here.
        "quota": {"QUOTA_CLOCK": "topic", "QUOTA_REFRESH_S": "1800"},
        "pre": {
            "PREEMPTION_CLOCK": "topic",
            "PREEMPTION_CLOCK_NAME": name,
            # An ack takes a wall second or so: at 480x that is minutes of the sample.
            "PREEMPTION_ACK_MARGIN_S": "1800",
            "PREEMPTION_BIND_START_TIMEOUT_S": "3600",
            "PREEMPTION_UNKNOWN_WORK_AFTER_S": "3600",
            "PREEMPTION_GRACE_S": "60",
        },
        "agent": {
            "AGENT_CLOCK": "topic",
            "AGENT_CLOCK_NAME": name,
            "AGENT_COMMAND_MAX_AGE_S": "86400",
            "AGENT_CLOCK_SKEW_S": "86400",
        },
    }


async def drive_clock(
    settings: PlatformSettings,
    name: str,
    sample: Path,
    run: str,
    gfs: str,
    speed: float,
    state: ClockState,
    stop: asyncio.Event,
    dsn: str,
) -> None:
    """The accelerated clock (services/demo/clock.py) over the sample, at `speed`x, held while a
    pool's forecast lags (`forecast_gate`)."""
    from gfs.services.producers.replay import job_to_submission
    from gfs.services.simulator.traces.gfs_format import load_gfs_trace

    trace = load_gfs_trace(sample)
    end = max([trace.horizon_s, *(j.submit_s for j in trace.jobs)])
    gate, connection = await forecast_gate(dsn, {n.gpu_model for n in trace.nodes})
    try:
        await run_clock(
            name=name, base_s=BASE_S, jobs=trace.jobs, end_s=end, step_s=speed * TICK_S, period_s=TICK_S,
            status_every_s=STATUS_S, bootstrap=settings.bootstrap_servers,
            to_task=lambda job: job_to_submission(job, speed=1.0, task_prefix=f"{run}-", gfs_program=gfs),
            state=state, stop=stop, gate=gate,
        )  # fmt: skip
    finally:
        await connection.close()


async def forecast_gate(dsn: str, pools: set[str]) -> tuple[Callable[[float], Awaitable[bool]], Any]:
    """The clock's gate and the connection it reads with: sample instant t may be played while the
    newest forecast the quota service has received for each of `pools` is at most
    MAX_FORECAST_AGE_S older than t (a pool with none yet counts as one from the sample's start).
    Read from the quota service's own record of its inputs (`quota_input_latest`), which a new
    forecast updates at once (its quota waits for the next STATUS: gating on the quota would never
    open a held clock)."""
    connection = await asyncpg.connect(dsn)

    async def fresh(t: float) -> bool:
        rows = await connection.fetch(
            "SELECT pool, as_of FROM quota_input_latest WHERE kind = 'forecast' AND pool = ANY($1::text[])",
            sorted(pools),
        )
        origins = {r["pool"]: r["as_of"].timestamp() - BASE_S for r in rows}
        oldest = min((origins.get(p, 0.0) for p in pools), default=0.0)
        return t - oldest <= MAX_FORECAST_AGE_S

    return fresh, connection
