"""The quota service's per-pool book: what it knows of a pool, and the quota that follows from it.

Pure (no I/O, no clock: times are arguments, seconds since the epoch). The service feeds it the
latest `PoolStatus`, the latest pool forecast and every `GuaranteePeriodClosed`, and asks it for a
quota each refresh interval; the arithmetic is the core's `ForecastQuota` (the simulator's), so the
live quota equals the simulated one on the same inputs.

Outcomes arrive out of order (several partitions, redeliveries), so they are kept by
(task, period start), which also makes a redelivered outcome a no-op, and the feedback counts those
whose period ended inside the window.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from gfs.services.core.guarantee import OFFERED_GUARANTEE_HOURS
from gfs.services.core.quota import (
    ForecastQuota,
    QuotaInputs,
    QuotaSettings,
    hp_floor,
    hp_usage_ahead,
    spare_from_quantile,
)

HOUR_S = 3600.0


@dataclass(frozen=True, slots=True)
class StatusView:
    """A pool's `PoolStatus`, in the core's terms."""

    observed_s: float
    capacity: int
    idle_gpus: int
    spot_in_use: float
    hp_running: float
    hp_queued: float
    head_wait_s: float | None
    quota_held_wait_s: float | None
    # Issue 21: HP the pool can serve (running + placeable queued + a reservation's growth), the
    # reservation's task, and what held the spot head; None from a status without them.
    hp_placeable: float | None = None
    reserved_task_id: str | None = None
    spot_head_held_by: str | None = None
    spot_smallest_gpus: float | None = None  # issue 35's progress floor


@dataclass(frozen=True, slots=True)
class ForecastView:
    """A pool forecast: per hour ahead (1..n from `origin_s`) its mean, std and quantiles."""

    origin_s: float
    mean: tuple[float, ...]
    std: tuple[float, ...]
    quantiles: tuple[Mapping[str, float], ...]
    version: str
    fallback: bool

    def quantile(self, p: float, now_s: float) -> np.ndarray:
        """The p-quantile for the hours from the one holding `now_s` on (hours already over are
        dropped). A level the forecast does not carry is taken from its Gaussian."""
        skip = max(0, int((now_s - self.origin_s) // HOUR_S))
        level = f"{p:g}"
        z = NormalDist().inv_cdf(p)
        values = [
            q[level] if level in q else m + z * s
            for m, s, q in zip(self.mean[skip:], self.std[skip:], self.quantiles[skip:], strict=True)
        ]
        return np.asarray(values, dtype=np.float64)


@dataclass(frozen=True, slots=True)
class QuotaComputation:
    """One refresh of one pool: the quota per offered guarantee duration and everything behind it."""

    pool: str
    computed_s: float
    valid_until_s: float
    quota: Mapping[int, float]
    eta: float
    capacity: int
    inputs: QuotaInputs
    forecast: ForecastView | None  # None: none usable, the quota fell back to what is idle
    min_free: Mapping[int, float]  # min over h <= H of the predicted spare GPUs, before eta
    failed_recent: int
    succeeded_recent: int
    # Why spot waits (issue 21): the HP usage floor the quota used (None: no floor), the
    # reservation's task and what held the spot head, as the pool's status said.
    hp_floor: float | None = None
    reserved_task_id: str | None = None
    spot_head_held_by: str | None = None
    # The book's failed outcomes recorded when this was computed (eta's new failures start after).
    failed_seen: int = 0

    @property
    def eviction_rate(self) -> float | None:
        total = self.failed_recent + self.succeeded_recent
        return None if total == 0 else self.failed_recent / total

    @property
    def forecast_version(self) -> str:
        if self.forecast is None:
            return "none (idle-capacity fallback)"
        suffix = " (fallback)" if self.forecast.fallback else ""
        return f"{self.forecast.version}@{self.forecast.origin_s:.0f}{suffix}"


@dataclass(slots=True)
class PoolBook:
    """Everything the quota service keeps for one pool; `eta` and `version` are persisted."""

    pool: str
    settings: QuotaSettings = field(default_factory=QuotaSettings)
    eta: float = 1.0
    version: int = 0
    # Failed outcomes recorded since the book was built, and that count when the quota in force
    # was committed (None: none since): eta shrinks only on failures recorded after it.
    failed_seen: int = 0
    failed_at_commit: int | None = None
    status: StatusView | None = None
    forecast: ForecastView | None = None
    # (task id, period start) -> (period end, succeeded)
    outcomes: dict[tuple[str, float], tuple[float, bool]] = field(default_factory=dict)
    # A forecast older than this (from its origin) is not used: the quota falls back to idle GPUs.
    max_forecast_age_s: float = 2 * HOUR_S
    # (observed time, realised HP running + queued, the p-quantile the forecast in force predicted)
    coverage_samples: deque[tuple[float, float, float]] = field(default_factory=deque)

    def update_status(self, status: StatusView) -> bool:
        """Keep the newest status (an older one, redelivered, is ignored). True if taken. Each new
        status is also a sample of forecast health: realised HP demand against the p-quantile the
        forecast in force predicted for that hour."""
        if self.status is not None and status.observed_s <= self.status.observed_s:
            return False
        self.status = status
        forecast = self.forecast
        if forecast is not None and 0 <= status.observed_s - forecast.origin_s <= self.max_forecast_age_s:
            predicted = forecast.quantile(self.settings.guarantee_rate, status.observed_s)
            if len(predicted):
                # The forecast is of the servable demand (issue 35), which the status carries as
                # its floor; a status without it: running + queued, as before.
                realised = status.hp_placeable
                if realised is None:
                    realised = status.hp_running + status.hp_queued
                self.coverage_samples.append((status.observed_s, realised, float(predicted[0])))
        return True

    def forecast_health(self, now_s: float, window_s: float = 24 * HOUR_S) -> tuple[int, float | None]:
        """(samples, share of them where realised demand stayed at or below the predicted
        p-quantile) over the last `window_s`; a calibrated forecast covers about p of them."""
        while self.coverage_samples and self.coverage_samples[0][0] <= now_s - window_s:
            self.coverage_samples.popleft()
        n = len(self.coverage_samples)
        if n == 0:
            return 0, None
        return n, sum(realised <= predicted + 1e-9 for _, realised, predicted in self.coverage_samples) / n

    def update_forecast(self, forecast: ForecastView) -> bool:
        if self.forecast is not None and forecast.origin_s < self.forecast.origin_s:
            return False
        self.forecast = forecast
        return True

    def record_outcome(self, task_id: str, start_s: float, end_s: float, succeeded: bool) -> bool:
        """True if new (a redelivered outcome is a no-op)."""
        key = (task_id, start_s)
        if key in self.outcomes:
            return False
        self.outcomes[key] = (end_s, succeeded)
        self.failed_seen += not succeeded
        return True

    def recent(self, now_s: float) -> tuple[int, int]:
        """(failed, succeeded) periods that ended in (now - window, now]; older ones are dropped."""
        horizon = now_s - self.settings.feedback_window_s
        failed = succeeded = 0
        for key in [k for k, (end, _) in self.outcomes.items() if end <= horizon]:
            del self.outcomes[key]
        for end, ok in self.outcomes.values():
            if end <= now_s:
                succeeded += ok
                failed += not ok
        return failed, succeeded

    def compute(self, now_s: float, refresh_s: float, *, feedback: bool = True) -> QuotaComputation | None:
        """The quota at `now_s` (None until a status arrived: without capacity there is nothing to
        size); `feedback` False keeps eta as it is. The new eta is kept in the book only when the
        caller `commit`s it."""
        status = self.status
        if status is None:
            return None
        forecast = self.forecast
        if forecast is not None and not 0 <= now_s - forecast.origin_s <= self.max_forecast_age_s:
            forecast = None  # stale, or from the future (a clock skew): not used
        quantile = None if forecast is None else forecast.quantile(self.settings.guarantee_rate, now_s)
        if quantile is not None and len(quantile) == 0:
            forecast, quantile = None, None
        failed, succeeded = self.recent(now_s)
        inputs = QuotaInputs(
            capacity=status.capacity,
            idle_gpus=status.idle_gpus,
            spot_in_use=status.spot_in_use,
            hp_quantile=quantile,
            eta=self.eta,
            failed_recent=failed,
            succeeded_recent=succeeded,
            head_wait_s=status.head_wait_s,
            hp_observed=status.hp_running + status.hp_queued,
            quota_held_wait_s=status.quota_held_wait_s,
            hp_placeable=status.hp_placeable,
            # None before the first commit: a restarted service may shrink once on what it reloaded.
            failed_new=None if self.failed_at_commit is None else self.failed_seen - self.failed_at_commit,
            spot_smallest_gpus=status.spot_smallest_gpus,
        )
        out = ForecastQuota(settings=self.settings, feedback=feedback).refresh(inputs)
        offered = {h: float(out.quota[h]) for h in OFFERED_GUARANTEE_HOURS if h in out.quota}
        if quantile is None:
            min_free = dict.fromkeys(offered, float(status.idle_gpus + status.spot_in_use))
        else:
            spare = spare_from_quantile(hp_usage_ahead(quantile, inputs, self.settings), status.capacity)
            min_free = {h: float(spare[: min(h, len(spare))].min()) for h in offered}
        return QuotaComputation(
            pool=self.pool,
            computed_s=now_s,
            # One missed refresh is tolerated; after two the preemption service's stale rule applies.
            valid_until_s=now_s + 2 * refresh_s,
            quota=offered,
            eta=out.eta,
            capacity=status.capacity,
            inputs=inputs,
            forecast=forecast,
            min_free=min_free,
            failed_recent=failed,
            succeeded_recent=succeeded,
            failed_seen=self.failed_seen,
            hp_floor=hp_floor(inputs, self.settings),
            reserved_task_id=status.reserved_task_id,
            spot_head_held_by=status.spot_head_held_by,
        )

    def commit(self, computed: QuotaComputation) -> None:
        """The computation was persisted: its eta is now the pool's, under a new version."""
        if not math.isfinite(computed.eta):
            raise ValueError(f"eta must be finite, got {computed.eta}")
        self.eta = computed.eta
        self.failed_at_commit = computed.failed_seen
        self.version += 1
