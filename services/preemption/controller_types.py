"""The pool controller's vocabulary: its settings, the SRE controls, the effects it returns, the
ids it derives, and the records it keeps per task, bind, eviction and ending attempt.

The bottom of the controller's parts (controller.py's module doc lists them): data only, no
decision; every part imports from here, and this module from none of them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from schemas.commands import BindCommand, EvictCommand, WarnCommand
from schemas.tasks import (
    EvictionReason,
    Placement,
    RejectionReason,
    TaskSubmitted,
)
from schemas.tasks import TaskClass as WireClass
from services.core import reasons as core_reasons
from services.core.policies.registry import build_policy
from services.preemption.attempts import Attempt
from services.preemption.seen_tasks import DEFAULT_WINDOW_S
from services.preemption.tenant_budgets import (
    budgets_as_dict,
    budgets_from_dict,
    check_budgets,
)

# Namespace of the command and event ids the controller derives (uuid5 of pool, salt and counter).
ID_NAMESPACE = uuid.UUID("6a1f4c52-2d0e-4f1b-9a57-0c9e3b8d7e11")


def command_id(pool: str, salt: str, counter: int) -> uuid.UUID:
    """uuid5 of "<pool>/<counter>" (no salt: journals from before salts) or "<pool>/<salt>/<counter>"."""
    name = f"{pool}/{counter}" if not salt else f"{pool}/{salt}/{counter}"
    return uuid.uuid5(ID_NAMESPACE, name)


def id_salt(epoch: int | None) -> str:
    """The id salt of journal rows written under `epoch` (None: rows from before 0006, no salt)."""
    return "" if epoch is None else f"e{epoch}"


# Policies whose runtime needs lease renewals the live service does not drive (the simulator's
# engine does): refused by name rather than run wrongly.
LEASE_POLICIES = frozenset({"chronus"})
DEFAULT_CHECKPOINT_S = 3600.0  # what the core assumes when a task declares none (spec 5.4)

_REJECTIONS = {
    core_reasons.Rejection.UNKNOWN_POOL: RejectionReason.UNKNOWN_GPU_MODEL,
    core_reasons.Rejection.WORKER_LARGER_THAN_NODE: RejectionReason.REQUEST_LARGER_THAN_ANY_NODE,
    core_reasons.Rejection.GANG_LARGER_THAN_POOL: RejectionReason.GANG_LARGER_THAN_POOL,
    core_reasons.Rejection.INVALID_REQUEST: RejectionReason.REQUEST_LARGER_THAN_ANY_NODE,
}
_EVICTION_REASONS = {
    core_reasons.EvictionReason.PREEMPTED_BY_HP: EvictionReason.PREEMPTED_BY_HP,
    core_reasons.EvictionReason.NODE_DOWN: EvictionReason.NODE_LOST,
    core_reasons.EvictionReason.CANCELLED: EvictionReason.CANCELLED,
    core_reasons.EvictionReason.LEASE_NOT_RENEWED: EvictionReason.QUOTA_REDUCED,
}


def utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    policy: str = "gfs"
    t_win_s: float = 31 * 86400.0
    cost_weight: float = 5.0
    grace_s: float = 30.0  # EvictCommand.grace_seconds for preemptions
    ack_margin_s: float = 10.0  # after the grace period, held binds go out even without an ack
    # Reconciliation (services/preemption/reconcile.py), for nodes whose agent reports its workers:
    # a bind none of whose workers started this long after it was issued is issued again, and a
    # worker of an attempt the service does not hold there, reported this long, is stopped.
    bind_start_timeout_s: float = 120.0
    unknown_after_s: float = 60.0
    # How long after its submission an ended task's id still rejects a second submission
    # (seen_tasks.py: the redelivery window).
    seen_window_s: float = DEFAULT_WINDOW_S

    def __post_init__(self) -> None:
        if self.policy in LEASE_POLICIES:
            raise ValueError(
                f"policy {self.policy!r} is lease-based: the live service does not renew leases; "
                "use it in the simulator only"
            )
        build_policy(self.policy)  # unknown names raise here, at start-up, with the known names
        if self.grace_s < 0 or self.ack_margin_s < 0:
            raise ValueError("grace_s and ack_margin_s must not be negative")
        if self.bind_start_timeout_s <= 0 or self.unknown_after_s < 0:
            raise ValueError("bind_start_timeout_s must be positive and unknown_after_s not negative")


QUOTA_MODES = ("freeze", "override")


@dataclass(frozen=True, slots=True)
class Controls:
    """The SRE controls in force on one pool (services/preemption/controls.py sets them)."""

    kill_switch: bool = False  # no preemption at all
    quota_mode: str | None = None  # "freeze", "override" or None (the quota service's quota)
    quota_gpus: tuple[tuple[int, float], ...] = ()  # the override, per guarantee hours
    max_evictions: int | None = None  # eviction cap: at most this many per interval_s (None: none)
    interval_s: float = 3600.0
    # Per-tenant eviction budgets, sorted: (tenant, max evictions, "day" | "periods") (controls.py).
    tenant_budgets: tuple[tuple[str, int, str], ...] = ()

    def __post_init__(self) -> None:
        if self.quota_mode is not None and self.quota_mode not in QUOTA_MODES:
            raise ValueError(f"quota mode must be one of {QUOTA_MODES} or None, not {self.quota_mode!r}")
        if self.quota_mode == "override" and not self.quota_gpus:
            raise ValueError("a quota override needs quota_gpus")
        if any(h < 1 or q < 0 for h, q in self.quota_gpus):
            raise ValueError("quota_gpus: guarantee hours >= 1 and GPUs >= 0")
        if self.max_evictions is not None and (self.max_evictions < 0 or not 0 < self.interval_s <= 86400):
            raise ValueError("eviction cap: max_evictions >= 0 and interval_s in (0, 86400]")
        check_budgets(self.tenant_budgets)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kill_switch": self.kill_switch, "quota_mode": self.quota_mode,
            "quota_gpus": {str(h): q for h, q in self.quota_gpus}, "max_evictions": self.max_evictions,
            "interval_s": self.interval_s,
            "tenant_budgets": budgets_as_dict(self.tenant_budgets),
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Controls:
        gpus = data.get("quota_gpus") or {}
        return cls(
            kill_switch=bool(data.get("kill_switch", False)),
            quota_mode=data.get("quota_mode"),
            quota_gpus=tuple(sorted((int(h), float(q)) for h, q in gpus.items())),
            max_evictions=None if data.get("max_evictions") is None else int(data["max_evictions"]),
            interval_s=float(data.get("interval_s", 3600.0)),
            tenant_budgets=budgets_from_dict(data.get("tenant_budgets")),  # absent before issue 27
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """One decision record (persisted; `gfs explain` reads them)."""

    task_id: str
    kind: str  # accepted, rejected, started, evicted, bound, withdrawn, finished, node_down, ...
    at_s: float
    detail: dict[str, Any]


@dataclass(slots=True)
class Effects:
    events: list[BaseModel] = field(default_factory=list)  # lifecycle events
    commands: list[BindCommand | EvictCommand | WarnCommand] = field(default_factory=list)  # unsigned
    decisions: list[Decision] = field(default_factory=list)

    def extend(self, other: Effects) -> None:
        self.events += other.events
        self.commands += other.commands
        self.decisions += other.decisions

    def __bool__(self) -> bool:
        return bool(self.events or self.commands or self.decisions)


@dataclass(slots=True)
class _Task:
    submitted: TaskSubmitted
    attempt: int = 0
    binds: dict[uuid.UUID, BindCommand] = field(default_factory=dict)  # current attempt's commands
    run: Attempt | None = None  # the current attempt's state machine (None: queued)
    started: dict[int, float] = field(default_factory=dict)  # worker -> WorkerStarted time
    periods_closed: int = 0  # guarantee periods of the current run already reported
    evicted: bool = False  # stopped and requeued before: its next start pays the restart overhead


@dataclass(frozen=True, slots=True)
class _Bound:
    """What a BindCommand addressed: its acks must match it (`PoolController.refusal`)."""

    task_id: str
    node: str
    attempt: int
    workers: frozenset[int]


@dataclass(slots=True)
class _Eviction:
    node: str
    task_ids: tuple[str, ...]
    attempt: int | None
    reported: bool = False  # its ack (or, NODE_LOST, the command itself) was recorded


@dataclass(slots=True)
class _Ending:
    """An evicted attempt whose end is not known yet: what to report once it is (module doc). Its
    deadline and which nodes acknowledged for held starts are the driver's (core/driver/held.py)."""

    task_id: str
    task_class: WireClass
    run: Attempt
    commands: dict[uuid.UUID, str]  # eviction command -> node
    reason: EvictionReason
    lost: float  # GPU-seconds since the last checkpoint
    requeued: bool
    closes: list[BaseModel]  # the guarantee periods the stop closed (a FAILED one last if any)
    failed_close: bool
    placements: tuple[Placement, ...] = ()
    started: dict[int, float] = field(default_factory=dict)  # worker -> WorkerStarted time
    acked_at: dict[str, datetime] = field(default_factory=dict)
    exited_at: datetime | None = None
    preemptor: str | None = None  # the HP task that needed the GPUs (a re-issued eviction names it)
    decided_s: float = 0.0  # the runtime's time of the stop (its failed period was logged then)
