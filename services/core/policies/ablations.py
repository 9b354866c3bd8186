"""GFS ablations (spec 6.5): each removes one ingredient, everything else as in `gfs`.

- gfs-no-forecast: reactive quota (spot may use whatever is idle), no forecast, no eta;
- gfs-no-feedback: forecast quota with eta fixed at 1 (no eviction feedback);
- gfs-fifo-victims: GFS quota and placement, but the production-like first-node victims.

Issue 10's quota changes, each switched back alone (and all at once: gfs-paper, the GFS of the
paper's setting as this project ran it before issue 10):
- gfs-trace-demand: the forecast is of the trace-defined HP demand, not the observed one;
- gfs-no-demand-floor: HP usage ahead is the forecast quantile alone (no running + queued floor);
- gfs-eta-unbounded: eta may lift the quota to 1.5 x the p-quantile spare;
- gfs-grow-on-wait: eta grows whenever the spot queue's head waited, held back by the quota or not.

Issue 21's changes, each switched back alone:
- gfs-queued-floor: the floor counts every queued HP GPU, placeable or not (issue 10's floor);
- gfs-no-reservation: no head-of-queue reservation for long-waiting HP tasks.

Issue 22's change, switched back alone (and in gfs-paper, which predates it):
- gfs-no-eta-recovery: eta waits for `min_periods` outcomes before it may grow again.

Issue 35's changes, each switched back alone, and all three at once (gfs-issue21: the GFS of
issue 21's defaults):
- gfs-observed-demand: the forecast is of running + every queued HP GPU (issue 10), not of the
  servable demand (core/servable.py);
- gfs-reservation-growth: the floor protects a reservation's growth again;
- gfs-hold-reserved: a reservation's idle GPUs stay empty while its holder waits (no spot there).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from gfs.services.core.policies.gfs import build_gfs
from gfs.services.core.policies.protocols import SchedulingPolicy
from gfs.services.core.quota import ForecastQuota, QuotaSettings, ReactiveQuota
from gfs.services.core.victims_first_node import FirstNodeVictims


def build_gfs_no_forecast(settings: QuotaSettings | None = None) -> SchedulingPolicy:
    return dataclasses.replace(
        build_gfs(settings), name="gfs-no-forecast", quota=ReactiveQuota(settings=settings or QuotaSettings())
    )


def build_gfs_no_feedback(settings: QuotaSettings | None = None) -> SchedulingPolicy:
    quota = ForecastQuota(settings=settings or QuotaSettings(), feedback=False)
    return dataclasses.replace(build_gfs(settings), name="gfs-no-feedback", quota=quota)


def _quota_variant(name: str, **changes: object) -> Callable[[QuotaSettings | None], SchedulingPolicy]:
    def factory(settings: QuotaSettings | None = None) -> SchedulingPolicy:
        # The caller's settings (a swept p, say) stay; only the ablated fields change.
        varied = dataclasses.replace(settings or QuotaSettings(), **changes)  # type: ignore[arg-type]
        return dataclasses.replace(build_gfs(varied), name=name)

    return factory


QUOTA_ABLATIONS: dict[str, dict[str, object]] = {
    # Issue 21: the floor counts every queued HP GPU again (issue 10's rule), not only the placeable.
    "gfs-queued-floor": {"placeable_floor": False},
    "gfs-running-demand": {"demand_source": "running"},
    "gfs-trace-demand": {"demand_source": "trace"},
    "gfs-no-demand-floor": {"observed_floor": False},
    "gfs-eta-unbounded": {"eta_max": 1.5},
    "gfs-grow-on-wait": {"grow_only_when_quota_binds": False},
    # Issue 22: eta waits for evidence again (the spot stall once the quota admits no spot task).
    "gfs-no-eta-recovery": {"grow_without_evidence": False},
    # Issue 35's series and floor, each switched back alone.
    "gfs-observed-demand": {"demand_source": "observed"},
    "gfs-reservation-growth": {"protect_reservation_growth": True},
    # Issue 35's trade-off curve: the quota's confidence p (the guarantee rate) above 0.9.
    "gfs-p95": {"guarantee_rate": 0.95},
    "gfs-p99": {"guarantee_rate": 0.99},
    # Issue 35's eta changes, each switched back alone.
    "gfs-eta-compounds": {"shrink_on_new_failures": False},
    "gfs-no-progress-floor": {"progress_floor": False},
    "gfs-paper": {
        "demand_source": "trace",
        "observed_floor": False,
        "eta_max": 1.5,
        "grow_only_when_quota_binds": False,
        "grow_without_evidence": False,
    },
}


def build_quota_ablations() -> dict[str, Callable[[QuotaSettings | None], SchedulingPolicy]]:
    return {name: _quota_variant(name, **changes) for name, changes in QUOTA_ABLATIONS.items()}


def build_gfs_hold_reserved(settings: QuotaSettings | None = None) -> SchedulingPolicy:
    """Issue 35's lending switched off: a reservation's idle GPUs stay empty while its holder waits."""
    return dataclasses.replace(build_gfs(settings), name="gfs-hold-reserved", lend_reserved=False)


def _claims_variant(name: str, claims: str) -> Callable[[QuotaSettings | None], SchedulingPolicy]:
    def factory(settings: QuotaSettings | None = None) -> SchedulingPolicy:
        return dataclasses.replace(build_gfs(settings), name=name, spot_claims=claims)

    return factory


def build_gfs_outside_first(settings: QuotaSettings | None = None) -> SchedulingPolicy:
    """Spot tries the nodes outside a lent reservation first, its nodes only when nothing else
    fits (issue 35's first test attempt)."""
    return dataclasses.replace(build_gfs(settings), name="gfs-outside-first", lend_first=False)


def build_gfs_issue21(settings: QuotaSettings | None = None) -> SchedulingPolicy:
    """Issue 21's defaults: the observed-demand series, the reservation's growth in the floor, and
    no spot on a reservation's idle GPUs (all three of issue 35's changes reverted)."""
    varied = dataclasses.replace(
        settings or QuotaSettings(), demand_source="observed", protect_reservation_growth=True
    )
    return dataclasses.replace(build_gfs(varied), name="gfs-issue21", lend_reserved=False)


def build_gfs_no_reservation(settings: QuotaSettings | None = None) -> SchedulingPolicy:
    """Issue 21's head-of-queue reservation switched off: unbounded backfill past wide HP gangs."""
    return dataclasses.replace(build_gfs(settings), name="gfs-no-reservation", reserve_after_s=None)


def build_gfs_fifo_victims(settings: QuotaSettings | None = None) -> SchedulingPolicy:
    return dataclasses.replace(build_gfs(settings), name="gfs-fifo-victims", victims=FirstNodeVictims())
