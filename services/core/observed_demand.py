"""Observed HP demand: running plus queued HP GPUs per (pool, tenant), as the scheduler sees them.

Definition (issue 10): at minute m the observed demand of a series is the sum of g x w over its HP
tasks that were accepted and are not yet done (running, or queued: waiting for GPUs, requeued
after an eviction or a lost node), after every event at or before 60 m. A task stops counting when
it finishes, is cancelled or is rejected (a rejected task never counts). Each hour keeps the peak
of its 60 per-minute samples, because the quota must cover the worst minute of the hour.

Why not the trace-defined demand (every HP job as if started on submission): it hides the HP
backlog and the HP already running, and a live forecaster can observe only what the scheduler
sees. The same definition drives the simulator's forecasts and the live forecast stream.

Samples are taken lazily: every change first closes the minutes before it with the level that
held over them, so the cost is per event plus per hour crossed, never per simulated minute.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

MINUTES_PER_HOUR = 60
_DECIMALS = 6  # sums of fractional requests drift by ~1e-12; requests have a few decimals at most


class ObservedDemand:
    """Per-minute running + queued HP GPUs of fixed (pool, tenant) series, kept as hourly peaks.

    `hourly[h, i]` is series i's peak over the minutes of hour h and `pool_hourly[h, j]` the peak
    of pool j's per-minute total (not the sum of its tenants' peaks). Rows of hours not yet over
    stay 0; `complete_hours` says how many are final. Times past the last row are not sampled.
    """

    def __init__(self, keys: Sequence[tuple[str, str]], n_hours: int) -> None:
        if n_hours < 1:
            raise ValueError(f"n_hours must be >= 1, got {n_hours}")
        self.keys = tuple(sorted(set(keys)))
        self.pools = tuple(sorted({pool for pool, _ in self.keys}))
        self._series = {k: i for i, k in enumerate(self.keys)}
        pool_index = {p: j for j, p in enumerate(self.pools)}
        self._pool_index = pool_index
        self._tenants_of: dict[str, dict[str, int]] = {p: {} for p in self.pools}
        for i, (pool, tenant) in enumerate(self.keys):
            self._tenants_of[pool][tenant] = i
        self._pool_of = [pool_index[pool] for pool, _ in self.keys]
        self.level = np.zeros(len(self.keys))
        self.pool_level = np.zeros(len(self.pools))
        self.hourly = np.zeros((n_hours, len(self.keys)))
        self.pool_hourly = np.zeros((n_hours, len(self.pools)))
        self._next_minute = 0  # the first minute not sampled yet
        self._now = -math.inf

    @property
    def n_hours(self) -> int:
        return int(self.hourly.shape[0])

    @property
    def complete_hours(self) -> int:
        """Hours whose 60 samples are all taken (their peaks are final)."""
        return min(self._next_minute // MINUTES_PER_HOUR, self.n_hours)

    def advance(self, t: float) -> None:
        """Take the samples of every minute boundary before `t` (a boundary at exactly `t` waits
        until every event at `t` is applied)."""
        if t < self._now:
            raise ValueError(f"time went back: {t} < {self._now}")
        self._now = t
        last = math.ceil(t / 60.0) - 1  # the last minute m with 60 m < t
        first = self._next_minute
        if last < first:
            return
        self._next_minute = last + 1
        h0 = first // MINUTES_PER_HOUR
        h1 = min(last // MINUTES_PER_HOUR, self.n_hours - 1)
        if h0 > h1:
            return
        level = np.round(self.level, _DECIMALS) + 0.0  # + 0.0 turns -0.0 into 0.0
        pool_level = np.round(self.pool_level, _DECIMALS) + 0.0
        np.maximum(self.hourly[h0 : h1 + 1], level, out=self.hourly[h0 : h1 + 1])
        np.maximum(self.pool_hourly[h0 : h1 + 1], pool_level, out=self.pool_hourly[h0 : h1 + 1])

    def add(self, t: float, key: tuple[str, str], gpus: float) -> None:
        """An HP task of series `key` was accepted at `t` (it counts until `remove`)."""
        self._change(t, key, gpus)

    def remove(self, t: float, key: tuple[str, str], gpus: float) -> None:
        """The task finished or was cancelled at `t`."""
        self._change(t, key, -gpus)

    def _change(self, t: float, key: tuple[str, str], delta: float) -> None:
        try:
            i = self._series[key]
        except KeyError:
            raise KeyError(f"series {key} is not one of the {len(self.keys)} tracked") from None
        self.advance(t)
        self.level[i] += delta
        self.pool_level[self._pool_of[i]] += delta

    def set_levels(self, t: float, pool: str, levels: Mapping[str, float]) -> None:
        """Pool `pool`'s levels from `t` on, per tenant (tenants left out are at 0): the servable
        series (core/servable.py) is a function of the pool's state, set after each instant
        instead of changed by task events. A pool without tracked series is ignored. `t` may be
        before the tracker's time when no minute boundary in between was sampled (a driver that
        takes a level only once a boundary needs it)."""
        tenants = self._tenants_of.get(pool)
        if tenants is None:
            return
        unknown = set(levels) - set(tenants)
        if unknown:
            raise KeyError(f"series {sorted((pool, u) for u in unknown)} are not tracked")
        self.advance(max(t, self._now))
        total = 0.0
        level = self.level
        for tenant, i in tenants.items():
            v = levels.get(tenant, 0.0)
            level[i] = v
            total += v
        self.pool_level[self._pool_index[pool]] = total
