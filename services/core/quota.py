"""Spot quota per pool (spec 4.1 with the eta fix of spec 8 #2) and the reactive alternative.

A `QuotaPolicy` turns what is known at a refresh (capacity, idle GPUs, the forecast quantile of
HP demand, the HP running and queued now, recent guarantee outcomes) into the quota per guarantee
duration and the next eta. The quota caps the pool's total concurrent spot GPUs: admit j only if
S_v + g_j w_j <= Q_v(H_j).

Issue 10 (docs/decisions.md, "Observed demand and a bounded feedback") changed three defaults,
each kept as a setting so its ablation can switch it back alone:
- the forecast is of *observed* HP demand (running plus queued HP GPUs), and the HP usage the
  quota assumes for every hour ahead is never below what is running plus queued right now
  (`observed_floor`): HP work the scheduler can already see will claim its GPUs first; issue 21
  narrowed "queued" to the queued HP the pool could place now (`placeable_floor`, placeable.py);
- eta never lifts the quota above the p-quantile spare (`eta_max` = 1): a larger eta promises
  spot GPUs the forecast itself expects HP to take back;
- eta grows only when spot work was held back by the quota (`grow_only_when_quota_binds`): when
  placement blocks the queue, a larger quota admits nothing and only raises later evictions.

Issue 22 (docs/decisions.md, "Eta recovers without evidence"): with fewer than `min_periods`
outcomes in the window, eta still grows when the quota held spot work back long enough, judged on
the window padded with successes up to `min_periods` (`grow_without_evidence`). Before, eta waited
for evidence that only admitted spot work can produce: at its floor, with the quota below every
queued spot task, no spot ran, nothing was logged and eta never moved again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

DEMAND_SOURCES = ("servable", "observed", "running", "trace")


@dataclass(frozen=True, slots=True)
class QuotaSettings:
    guarantee_rate: float = 0.9  # p
    # Target eviction rate eps of the feedback; None: 1 - p, the promise the quota is sized for.
    target_eviction_rate: float | None = None
    eta_min: float = 0.1
    eta_max: float = 1.0  # 1.5 before issue 10 (ablation gfs-eta-unbounded)
    min_periods: int = 20  # guarantee outcomes needed in the feedback window before reacting
    shrink_at: float = 1.5  # x eps
    grow_at: float = 0.5  # x eps
    head_wait_s: float = 3600.0  # grow only if the head spot task waited longer than this
    feedback_window_s: float = 4 * 3600.0
    max_guarantee_hours: int = 4
    # Which HP-demand series the forecast is of: "servable" (issue 35: running HP plus the queued
    # HP that can start now on GPUs HP does not hold, core/servable.py), "observed" (running + every
    # queued HP GPU, issue 10), "running" (HP holding GPUs only: the released simulator's series,
    # spec 3.2) or "trace" (every HP job as if started on submission, the paper's setting).
    demand_source: str = "servable"
    observed_floor: bool = True  # HP usage per hour ahead >= running + queued HP now
    # Issue 21: the floor counts only the queued HP the pool could place now (core/placeable.py)
    # plus a reservation's growth; False: every queued HP GPU, as issue 10 had it.
    placeable_floor: bool = True
    # Issue 21 also counted a reservation's growth (its GPUs beyond the HP running on its nodes)
    # in the floor; issue 35 does not: the holder starts on GPUs HP frees, never on spot's alone
    # (core/servable.py). True: issue 21's floor (ablation gfs-reservation-growth).
    protect_reservation_growth: bool = False
    grow_only_when_quota_binds: bool = True  # False: grow whenever the queue head waited long
    # Issue 22: with fewer than `min_periods` outcomes, grow as if the missing ones had succeeded
    # (never shrink on them); False: eta waits for `min_periods` outcomes (ablation
    # gfs-no-eta-recovery), which stalls spot for good once the quota admits none of it.
    grow_without_evidence: bool = True
    # Issue 35: eta shrinks only on failures logged since the previous refresh. The paper's rule
    # shrinks at every refresh while the same failures stay in the 4-hour window (48 refreshes of
    # 300 s): four evictions took a live pool's eta to its floor in minutes. False: every refresh
    # (ablation gfs-eta-compounds).
    shrink_on_new_failures: bool = True
    # Issue 35: a pool running no spot admits at least the smallest queued spot task that the
    # forecast's spare holds, whatever eta says: eta corrects the eviction rate of the spot that
    # runs; with none running it can only stall the queue (a live pool waited with nothing running).
    # False: eta alone (ablation gfs-no-progress-floor).
    progress_floor: bool = True

    def __post_init__(self) -> None:
        if not 0.0 < self.guarantee_rate < 1.0:
            raise ValueError(f"guarantee_rate must be in (0, 1), got {self.guarantee_rate}")
        if self.target_eviction_rate is not None and not 0.0 < self.target_eviction_rate < 1.0:
            raise ValueError(f"target_eviction_rate must be in (0, 1), got {self.target_eviction_rate}")
        if not 0.0 < self.eta_min <= self.eta_max:
            raise ValueError(f"need 0 < eta_min <= eta_max, got {self.eta_min}, {self.eta_max}")
        if self.demand_source not in DEMAND_SOURCES:
            raise ValueError(
                f"demand_source must be one of {', '.join(DEMAND_SOURCES)}, got {self.demand_source!r}"
            )

    @property
    def target(self) -> float:
        """The eviction rate the feedback steers to."""
        return 1.0 - self.guarantee_rate if self.target_eviction_rate is None else self.target_eviction_rate


@dataclass(frozen=True, slots=True)
class QuotaInputs:
    capacity: int
    idle_gpus: int
    spot_in_use: float
    hp_quantile: np.ndarray | None  # p-quantile of pool HP demand for horizon hours 1..H
    eta: float
    failed_recent: int  # failed guarantee periods in the pool in the feedback window
    succeeded_recent: int
    head_wait_s: float | None  # how long the spot queue's head has waited (None: empty queue)
    hp_observed: float = 0.0  # HP GPUs running plus queued in the pool now (g x w)
    # The longest wait of a spot task that the last pass held back because of the quota (the
    # head of a bucket whose attempt was over quota); None if the quota held nobody back.
    quota_held_wait_s: float | None = None
    # HP running plus the queued HP the pool could place now plus a reservation's growth
    # (core/placeable.py); None: not known (a status from before issue 21), the floor uses
    # `hp_observed`.
    hp_placeable: float | None = None
    # Failed periods logged since the previous refresh (None: not known; every refresh may shrink).
    failed_new: int | None = None
    # GPUs (g x w) of the smallest task at the head of a spot bucket (None: no spot queued).
    spot_smallest_gpus: float | None = None


@dataclass(frozen=True, slots=True)
class QuotaOutcome:
    quota: Mapping[int, float]  # guarantee hours -> Q_v(H)
    eta: float


class QuotaPolicy(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def uses_forecast(self) -> bool: ...

    @property
    def settings(self) -> QuotaSettings: ...

    def refresh(self, inputs: QuotaInputs) -> QuotaOutcome: ...


def spare_from_quantile(hp_quantile: np.ndarray, capacity: int) -> np.ndarray:
    """F_v(h) = C_v - clip(floor(U_v(h)), 0, C_v)."""
    used = np.clip(np.floor(hp_quantile + 1e-9), 0, capacity)
    return np.asarray(capacity - used, dtype=np.float64)


def quota_per_hours(spare: np.ndarray, eta: float, max_hours: int) -> dict[int, float]:
    """Q_v(H) = eta * min_{h <= H} F_v(h) for H = 1..max_hours (limited by the horizon)."""
    out: dict[int, float] = {}
    for hours in range(1, max_hours + 1):
        window = spare[: min(hours, len(spare))]
        out[hours] = eta * float(window.min()) if len(window) else 0.0
    return out


def next_eta(eta: float, inputs: QuotaInputs, s: QuotaSettings) -> float:
    """Eviction feedback toward the target rate eps: shrink by eps/ER when ER >= 1.5 eps; grow by
    (1.5 - ER/eps) (the fix of spec 8 #2, a factor in [1, 1.5]) when ER <= 0.5 eps and spot work
    has waited over `head_wait_s` (held back by the quota, by default). Clamped to
    [eta_min, eta_max].

    With fewer than `min_periods` outcomes in the window ER is not known. The paper's rule then
    does nothing, which can never end once the quota admits no spot task (no outcome can be
    logged). With `grow_without_evidence` eta may still grow, judged on the window padded with
    successes up to `min_periods`: ER_lo = failed / min_periods, the lowest rate the window can
    still show once it holds enough outcomes. So a window without failures grows eta by 1.5; one
    failure (of 20, eps 0.1) already stops growth until it leaves the window; and the rule meets
    the full one at `min_periods` (no jump). A sparse window never shrinks eta."""
    total = inputs.failed_recent + inputs.succeeded_recent
    sparse = total < s.min_periods
    if sparse and not s.grow_without_evidence:
        return eta
    eps = s.target
    rate = inputs.failed_recent / (s.min_periods if sparse else total)
    waited = inputs.quota_held_wait_s if s.grow_only_when_quota_binds else inputs.head_wait_s
    fresh = not s.shrink_on_new_failures or inputs.failed_new is None or inputs.failed_new > 0
    if not sparse and rate >= s.shrink_at * eps and fresh:
        eta = eta * eps / rate
    elif rate <= s.grow_at * eps and waited is not None and waited > s.head_wait_s:
        eta = eta * (1.5 - rate / eps)
    elif sparse or (rate >= s.shrink_at * eps and not fresh):
        return eta  # nothing new to go on: unchanged, not even clamped (as before issue 22)
    return min(s.eta_max, max(s.eta_min, eta))


def hp_floor(inputs: QuotaInputs, s: QuotaSettings) -> float | None:
    """The HP usage the quota assumes at least, for every hour ahead: HP running plus the queued HP
    the pool can serve (issue 21), or plus every queued HP GPU (issue 10); None without a floor."""
    if not s.observed_floor:
        return None
    if s.placeable_floor and inputs.hp_placeable is not None:
        return inputs.hp_placeable
    return inputs.hp_observed


def hp_usage_ahead(hp_quantile: np.ndarray, inputs: QuotaInputs, s: QuotaSettings) -> np.ndarray:
    """U_v(h): the forecast p-quantile, floored (by default) at `hp_floor`."""
    floor = hp_floor(inputs, s)
    if floor is None:
        return hp_quantile
    return np.asarray(np.maximum(hp_quantile, floor), dtype=np.float64)


@dataclass(frozen=True, slots=True)
class ForecastQuota:
    """GFS: capacity minus the forecast p-quantile of HP demand over the guarantee, times eta."""

    settings: QuotaSettings = QuotaSettings()
    feedback: bool = True
    name: str = "forecast"
    uses_forecast: bool = True

    def refresh(self, inputs: QuotaInputs) -> QuotaOutcome:
        eta = next_eta(inputs.eta, inputs, self.settings) if self.feedback else inputs.eta
        if inputs.hp_quantile is None or len(inputs.hp_quantile) == 0:
            # No forecast yet (or none to be had): fall back to what is idle now.
            return QuotaOutcome(reactive_quota(inputs, self.settings.max_guarantee_hours), eta)
        spare = spare_from_quantile(
            hp_usage_ahead(inputs.hp_quantile, inputs, self.settings), inputs.capacity
        )
        quota = quota_per_hours(spare, eta, self.settings.max_guarantee_hours)
        if self.settings.progress_floor:
            quota = with_progress(quota, spare, inputs)
        return QuotaOutcome(quota, eta)


def with_progress(quota: dict[int, float], spare: np.ndarray, inputs: QuotaInputs) -> dict[int, float]:
    """The progress floor (QuotaSettings.progress_floor): with no spot running, Q_v(H) is at least
    the smallest queued spot task if the spare over H (before eta) holds it."""
    need = inputs.spot_smallest_gpus
    if need is None or inputs.spot_in_use > 1e-9:
        return quota
    out = dict(quota)
    for hours in out:
        window = spare[: min(hours, len(spare))]
        if len(window) and need <= float(window.min()) + 1e-9:
            out[hours] = max(out[hours], float(need))
    return out


def reactive_quota(inputs: QuotaInputs, max_hours: int) -> dict[int, float]:
    cap = inputs.spot_in_use + inputs.idle_gpus
    return dict.fromkeys(range(1, max_hours + 1), float(cap))


@dataclass(frozen=True, slots=True)
class ReactiveQuota:
    """Production-like: spot may use whatever is idle, so the quota never binds before placement
    does (quota = capacity). No forecast, no feedback."""

    settings: QuotaSettings = QuotaSettings()
    name: str = "reactive"
    uses_forecast: bool = False

    def refresh(self, inputs: QuotaInputs) -> QuotaOutcome:
        return QuotaOutcome(
            dict.fromkeys(range(1, self.settings.max_guarantee_hours + 1), float(inputs.capacity)), inputs.eta
        )
