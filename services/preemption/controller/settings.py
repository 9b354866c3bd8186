"""The pool controller's settings and the SRE controls in force on a pool: values fixed when the
controller is built (`ControllerSettings`) or put in force by a journaled `control` entry
(`Controls`, services/preemption/sre/controls.py sets them).

Data only, no decision: the bottom of the controller package, importing none of its modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gfs.services.core.policies.registry import build_policy
from gfs.services.preemption.controller.seen_tasks import DEFAULT_WINDOW_S
from gfs.services.preemption.controller.tenant_budgets import (
    budgets_as_dict,
    budgets_from_dict,
    check_budgets,
)

# Policies whose runtime needs lease renewals the live service does not drive (the simulator's
# engine does): refused by name rather than run wrongly.
LEASE_POLICIES = frozenset({"chronus"})
DEFAULT_CHECKPOINT_S = 3600.0  # what the core assumes when a task declares none (spec 5.4)


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    policy: str = "gfs"
    t_win_s: float = 31 * 86400.0
    cost_weight: float = 5.0
    grace_s: float = 30.0  # EvictCommand.grace_seconds for preemptions
    ack_margin_s: float = 10.0  # after the grace period, held binds go out even without an ack
    # Reconciliation (services/preemption/controller/reconcile_rules.py), for nodes whose agent
    # reports its workers: a bind none of whose workers started this long after it was issued is
    # issued again, and a worker of an attempt the service does not hold there, reported this long,
    # is stopped.
    bind_start_timeout_s: float = 120.0
    unknown_after_s: float = 60.0
    # How long after its submission an ended task's id still rejects a second submission
    # (seen_tasks.py: the redelivery window).
    seen_window_s: float = DEFAULT_WINDOW_S
    # How long the command ledger keeps the commands of a task that left the pool (finished,
    # withdrawn, evicted for good): a later ack of one is refused as unmatched (ledger.py).
    command_keep_s: float = 86400.0

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
        if self.command_keep_s <= 0:
            raise ValueError("command_keep_s must be positive")


QUOTA_MODES = ("freeze", "override")


@dataclass(frozen=True, slots=True)
class Controls:
    """The SRE controls in force on one pool (services/preemption/sre/controls.py sets them)."""

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
