"""The quota service's SRE API contract: its response models and routes (OpenAPI 3.1).

`build_api` (service.py) answers these models and serves the document at /openapi.json; its
checked-in copy is docs/api/quota.openapi.json (`gfs schemas openapi --check`). Models forbid
extra keys, so a field added to a handler without being declared here fails the contract test
(tests/integration/test_openapi_contract.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from gfs.services.platform.openapi import Api, Operation, metrics_operation, openapi_operation


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Health(_Strict):
    status: Literal["alive"]


class Ready(_Strict):
    ready: bool


class Periods(_Strict):
    failed: int
    succeeded: int


class ForecastUsed(_Strict):
    version: str
    origin: str  # ISO 8601
    fallback: bool
    p_quantile: list[float] | None  # per hour ahead, the HP demand quantile the quota used


class PoolQuota(_Strict):
    quota_gpus: dict[str, float]  # guarantee hours -> spot GPUs
    eta: float
    version: int
    computed_at: str
    valid_until: str
    capacity_gpus: int
    eviction_rate_recent: float | None
    periods_recent: Periods
    hp_running_plus_queued: float
    hp_placeable: float | None
    hp_floor: float | None
    spare_gpus: dict[str, float]
    idle_gpus: int
    spot_in_use_gpus: float
    reserved_task_id: str | None
    spot_head_held_by: str | None
    forecast: ForecastUsed | None  # None: no usable forecast, the quota fell back to idle GPUs


class ForecastHealth(_Strict):
    samples_last_day: int
    coverage: float | None  # share of hours realised <= predicted p-quantile (None: no sample)
    target: float


API = Api(
    "GFS quota service SRE API",
    "The spot quota per pool and guarantee duration, the inputs behind it (eta, spare GPUs, the "
    "forecast used) and the forecast's coverage. Bad input answers 400 with a JSON body.",
    [
        Operation("GET", "/healthz", "Liveness", Health, tag="probes"),
        Operation(
            "GET",
            "/readyz",
            "Readiness: the fence is held and state loaded",
            Ready,
            errors={503: ("not ready: standby or loading (ready false)", Ready)},
            tag="probes",
        ),
        Operation(
            "GET",
            "/quotas",
            "The latest quota per pool and what it came from",
            dict[str, PoolQuota],
            tag="quota",
        ),
        Operation(
            "GET",
            "/forecast-health",
            "Forecast coverage per pool over the last day",
            dict[str, ForecastHealth],
            tag="quota",
        ),
        metrics_operation(),
        openapi_operation(),
    ],
)
