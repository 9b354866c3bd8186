"""The preemption service's SRE API contract: its response models and routes (OpenAPI 3.1).

The handlers (api.py, controls.py, dashboard.py, trace_view.py) answer these models and read
their query strings through `API.query`, so the document served at /openapi.json (and its
checked-in copy, docs/api/preemption.openapi.json, `gfs schemas openapi --check`) is what they
really accept and answer; tests/integration/test_openapi_contract.py validates live answers.

Models forbid extra keys, so a field a handler adds without declaring it fails the contract test.
Free-form parts (an explanation's detail, a decision record's detail) stay `dict[str, Any]`: they
are the journal's and the core's shapes, documented in docs/services.md.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gfs.services.platform.openapi import (
    Api,
    IntParam,
    Operation,
    StrParam,
    metrics_operation,
    openapi_operation,
)


# ----- requests (the control writes' bodies) -------------------------------------------------------
class _Write(BaseModel):
    model_config = ConfigDict(extra="forbid")

    who: str = Field(min_length=1, max_length=200)
    reason: str = Field(min_length=1, max_length=2000)
    pool: str | None = Field(default=None, min_length=1)


class KillSwitchRequest(_Write):
    on: bool


class QuotaRequest(_Write):
    pool: str = Field(min_length=1)  # required here
    mode: Literal["freeze", "override", "clear"]
    quota_gpus: dict[int, float] | None = None  # guarantee hours -> GPUs (override only)

    @model_validator(mode="after")
    def _values(self) -> QuotaRequest:
        if self.mode == "override":
            if not self.quota_gpus:
                raise ValueError('mode \'override\' needs quota_gpus, e.g. {"1": 10, "4": 6}')
            if any(h < 1 or q < 0 for h, q in self.quota_gpus.items()):
                raise ValueError("quota_gpus: guarantee hours >= 1 and GPUs >= 0")
        elif self.quota_gpus is not None:
            raise ValueError(f"quota_gpus is only for mode 'override', not {self.mode!r}")
        return self


class EvictionCapRequest(_Write):
    max_evictions: int | None = Field(ge=0)  # None lifts the cap
    interval_s: float = Field(default=3600.0, gt=0, le=86400)


class TenantBudgetRequest(_Write):
    """A spot tenant's eviction budget, in force in every pool (`pool` must be left out)."""

    tenant: str = Field(min_length=1, max_length=200)
    max_evictions: int | None = Field(ge=0)  # None lifts the budget
    per: Literal["day", "periods"] = "day"  # a rolling 24 h, or the tenant's last 100 guarantee periods

    @model_validator(mode="after")
    def _every_pool(self) -> TenantBudgetRequest:
        if self.pool is not None:
            raise ValueError("a tenant budget is in force in every pool (each counts its own): no pool")
        return self


# ----- responses ---------------------------------------------------------------------------------
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Health(_Strict):
    status: Literal["alive"]
    instance: str


class Ready(_Strict):
    ready: bool
    partitions: list[int]
    inbox_offsets: dict[str, int]  # partition -> the inbox offset read up to


class PoolView(_Strict):
    nodes: int
    down: list[str]
    capacity_gpus: int
    quota_gpus: dict[str, float]  # guarantee hours -> GPUs
    quota_version: str
    quota_frozen: bool
    pending_binds: list[str]
    hp_running: int
    spot_running: int
    hp_queued: int
    spot_queued: int


class Pools(_Strict):
    instance: str
    pools: dict[str, PoolView]


class DecisionRecord(_Strict):
    pool: str
    task_id: str
    kind: str
    at: str  # ISO 8601
    dry_run: bool
    detail: dict[str, Any]


class Explain(_Strict):
    task_id: str
    live: dict[str, Any] | None  # the owner's live explanation (None: no owned pool has seen it)
    decisions: list[DecisionRecord]


class ControlsApplied(_Strict):
    kill_switch: bool
    quota_mode: str | None
    quota_gpus: dict[str, float]
    max_evictions: int | None
    interval_s: float
    tenant_budgets: dict[str, dict[str, Any]] = {}  # tenant -> {"max_evictions", "per"}


class TenantBudgetLeft(_Strict):
    max_evictions: int
    per: Literal["day", "periods"]
    used: int  # evictions in this pool counted against the budget now
    left: int


class ControlInForce(_Strict):
    control: str
    scope: str
    value: dict[str, Any]
    set_by: str
    set_at: str
    reason: str
    audit_id: int


class PoolControls(_Strict):
    applied: ControlsApplied
    in_sync: bool
    eviction_budget_left: int | None
    quota_gpus: dict[str, float]
    tenant_budgets: dict[str, TenantBudgetLeft] = {}


class ControlsView(_Strict):
    instance: str
    controls: list[ControlInForce]
    pools: dict[str, PoolControls]


class AuditRow(_Strict):
    id: int
    at: str
    who: str
    control: str
    scope: str
    action: dict[str, Any]
    previous: dict[str, Any] | None
    reason: str
    instance: str


class ControlWritten(_Strict):
    audit_id: int
    control: str
    scope: str
    value: dict[str, Any] | None
    previous: dict[str, Any] | None
    applied_here: dict[str, ControlsApplied]


LIMIT_DECISIONS = IntParam("limit", default=50, low=1, high=500, description="newest records to return")
LIMIT_AUDIT = IntParam("limit", default=100, low=1, high=1000, description="newest audit rows to return")
# The dashboard's window and buckets (seconds): the eviction plot's range and resolution.
DASHBOARD_QUERY = (
    IntParam("limit", default=20, low=1, high=200, description="latest decisions shown"),
    IntParam("window_s", default=6 * 3600, low=60, high=31 * 86400, description="eviction window"),
    IntParam("bucket_s", default=300, low=1, high=86400, description="eviction bucket"),
)
_WRITE_ERRORS = {401: "missing or wrong bearer token", 503: "control writes disabled (no admin token)"}

API = Api(
    "GFS preemption service SRE API",
    "Reads of the decider's live state, decision records and safety controls; control writes "
    "need `Authorization: Bearer <PREEMPTION_ADMIN_TOKEN>`. Bad input answers 400 with a JSON "
    "body naming the parameter (docs/operations.md).",
    [
        Operation("GET", "/healthz", "Liveness: the event loop answers", Health, tag="probes"),
        Operation(
            "GET",
            "/readyz",
            "Readiness: partitions owned and read up to",
            Ready,
            errors={503: ("not ready yet (ready false)", Ready)},
            tag="probes",
        ),
        Operation("GET", "/pools", "The pools this instance owns: nodes, quota, queues", Pools, tag="state"),
        Operation(
            "GET",
            "/explain/{task_id}",
            "Why a task is where it is: live view and decisions",
            Explain,
            tag="state",
        ),
        Operation(
            "GET",
            "/decisions",
            "Newest decision records, newest first",
            list[DecisionRecord],
            query=(LIMIT_DECISIONS,),
            tag="state",
        ),
        metrics_operation(),
        Operation(
            "GET", "/controls", "Safety controls in force and as applied here", ControlsView, tag="controls"
        ),
        Operation(
            "GET",
            "/controls/audit",
            "Control changes, newest first",
            list[AuditRow],
            query=(LIMIT_AUDIT, StrParam("pool", "only this pool's and cluster-wide rows")),
            tag="controls",
        ),
        Operation(
            "POST",
            "/controls/kill-switch",
            "Stop (or resume) evictions and spot binds",
            ControlWritten,
            body=KillSwitchRequest,
            errors=_WRITE_ERRORS,
            tag="controls",
        ),
        Operation(
            "POST",
            "/controls/quota",
            "Freeze, override or clear a pool's spot quota",
            ControlWritten,
            body=QuotaRequest,
            errors=_WRITE_ERRORS,
            tag="controls",
        ),
        Operation(
            "POST",
            "/controls/eviction-cap",
            "Cap evictions per interval (null lifts it)",
            ControlWritten,
            body=EvictionCapRequest,
            errors=_WRITE_ERRORS,
            tag="controls",
        ),
        Operation(
            "POST",
            "/controls/tenant-budget",
            "Set a spot tenant's eviction budget per day or per 100 guarantee periods (null lifts it)",
            ControlWritten,
            body=TenantBudgetRequest,
            errors=_WRITE_ERRORS,
            tag="controls",
        ),
        Operation(
            "GET",
            "/dashboard",
            "The HTML dashboard",
            media_type="text/html",
            query=DASHBOARD_QUERY,
            tag="dashboard",
        ),
        Operation(
            "GET",
            "/dashboard/data",
            "The dashboard's data",
            dict[str, Any],
            query=DASHBOARD_QUERY,
            tag="dashboard",
        ),
        *(
            Operation(
                "GET",
                f"/dashboard/{name}.svg",
                f"The {name} plot",
                media_type="image/svg+xml",
                query=DASHBOARD_QUERY,
                tag="dashboard",
            )
            for name in ("quota", "evictions", "queues")
        ),
        Operation(
            "GET",
            "/dashboard/trace/{trace_id}",
            "One trace's spans from Jaeger",
            media_type="text/html",
            errors={404: "no such trace", 502: "Jaeger did not answer"},
            tag="dashboard",
        ),
        openapi_operation(),
    ],
)
