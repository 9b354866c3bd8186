"""Online recalibration of the conformal quantiles from recent misses (adaptive conformal inference).

The 7-day conformal shift (ml/calibration.py) fixes coverage on the last week *on average over the
window*. It never looks at whether the quantiles it published were hit: per tenant, the shipped
LSTM's q90 covered anywhere from 0.85 to 0.95 of hours, seen tenants or not (docs/forecasting.md,
"Coverage on tenants the model never saw"). This module closes that loop. Per series and
horizon it keeps a miscoverage level alpha and, every time a target hour completes, compares the
quantile published for it with what happened:

    alpha_{t+1} = clip(alpha_t + gamma * (target_miss - miss_t), alpha_min, alpha_max)

with miss_t = 1 if the realised value exceeded the published quantile, else 0, and target_miss =
1 - p (0.1 for the q90). The next forecast uses the conformal residual quantile at level
1 - alpha instead of p. Too many hits raise alpha (a lower level, a narrower quantile); a miss
lowers it by 9 times as much. The steps telescope (gamma * sum(target_miss - miss) = alpha_T -
alpha_0), so over any T hours in which the clip does not bind the miss rate is within
(alpha_max - alpha_min) / (gamma * T) of target_miss (Gibbs and Candes, NeurIPS 2021): the coverage
of each series goes to p whatever the model, the tenant or the regime, except where no quantile
inside the bounds can get there (see "floor" in ml/coverage.py).

Defaults: gamma = 0.01, alpha in [0.2, 3] x target_miss (for the q90: the level in [0.7, 0.98]).

The clip does two jobs. It bounds the level a long run of hits can reach (a tenant whose demand
repeats its last value for days would otherwise integrate alpha towards 1, and its first burst
would then meet a quantile far below the median); and it bounds how far a burst of misses can
push the level up. Both bounds and gamma were chosen by the worst case over several data sets
(docs/forecasting.md).

One copy of the rule serves both callers: `CalibratedForecaster` (ml/calibrated.py) applies it, and
both the simulator's `--forecast model` path and the live forecast stream build their forecaster
with `gfs.ml.inference.load_forecaster`. The stream stores the state (`to_json`) beside each pool's
history, so a restarted worker resumes with the same alphas and still scores the forecasts it
published before the restart.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

STATE_FORMAT = 1


@dataclass(frozen=True, slots=True)
class OnlineSettings:
    """Step and bounds of the update (defaults: docs/forecasting.md, "Online recalibration").

    The bounds are multiples of the target miss rate, so one setting serves every quantile asked
    for (the quota asks its guarantee rate, 0.9 by default; the stream 0.5 and 0.9): for p = 0.9,
    alpha in [0.02, 0.3], i.e. the level in [0.7, 0.98]; for p = 0.95, the level in [0.85, 0.99].
    """

    gamma: float = 0.01
    min_miss_ratio: float = 0.2
    max_miss_ratio: float = 3.0

    def __post_init__(self) -> None:
        if not 0.0 < self.gamma < 1.0:
            raise ValueError(f"gamma {self.gamma} outside (0, 1)")
        if not 0.0 <= self.min_miss_ratio <= 1.0 <= self.max_miss_ratio:
            raise ValueError(
                f"miss ratios [{self.min_miss_ratio}, {self.max_miss_ratio}] must bracket 1 (the target)"
            )

    def bounds(self, target_miss: float) -> tuple[float, float]:
        """(alpha_min, alpha_max) for a quantile whose target miss rate is `target_miss`."""
        return self.min_miss_ratio * target_miss, min(1.0, self.max_miss_ratio * target_miss)


DEFAULT_ONLINE = OnlineSettings()


def aci_step(
    alpha: np.ndarray | float,
    miss: np.ndarray | float,
    *,
    target_miss: float,
    gamma: float,
    alpha_min: float,
    alpha_max: float,
) -> np.ndarray:
    """One update of the miscoverage level: clip(alpha + gamma * (target_miss - miss)).

    `miss` is 1 where the published quantile was exceeded, 0 where it held. The clip keeps alpha,
    and so the quantile level 1 - alpha, inside [alpha_min, alpha_max].
    """
    raw = np.asarray(alpha, dtype=np.float64) + gamma * (target_miss - np.asarray(miss, dtype=np.float64))
    return np.asarray(np.clip(raw, alpha_min, alpha_max), dtype=np.float64)


@dataclass(slots=True)
class AciTracker:
    """The alphas of one family of quantiles (one per key and horizon) and what was published.

    Keys are tuples of strings: (pool, tenant) for tenants, (pool,) for pool totals. A key seen
    for the first time starts at alpha = target_miss, i.e. the plain conformal level p.
    """

    target_miss: float
    horizon: int
    alpha: dict[tuple[str, ...], np.ndarray] = field(default_factory=dict)
    # origin -> (keys, published quantiles [horizon, n_keys]); row h targets hour origin + h.
    published: dict[int, tuple[tuple[tuple[str, ...], ...], np.ndarray]] = field(default_factory=dict)

    def levels(self, keys: Sequence[tuple[str, ...]]) -> np.ndarray:
        """Quantile levels 1 - alpha, [horizon, n_keys]."""
        out = np.full((self.horizon, len(keys)), 1.0 - self.target_miss)
        for j, key in enumerate(keys):
            a = self.alpha.get(key)
            if a is not None:
                out[:, j] = 1.0 - a[: self.horizon]
        return out

    def publish(self, origin: int, keys: Sequence[tuple[str, ...]], quantiles: np.ndarray) -> None:
        """Remember the quantiles published at `origin` (a repeat replaces the keys it names)."""
        keys = tuple(keys)
        q = np.asarray(quantiles, dtype=np.float64).reshape(self.horizon, len(keys))
        old = self.published.get(origin)
        if old is not None and old[0] != keys:
            merged = dict(zip(old[0], old[1].T, strict=True)) | dict(zip(keys, q.T, strict=True))
            keys = tuple(merged)
            q = np.stack([merged[k] for k in keys], axis=1)
        self.published[origin] = (keys, q.copy())

    def observe(
        self,
        start: int,
        end: int,
        actual: Callable[[tuple[str, ...], int], float | None],
        settings: OnlineSettings,
    ) -> None:
        """Score every published quantile whose target hour is in [start, end), oldest target
        first, and step each key's alpha once per (target hour, horizon). `actual(key, hour)` is
        the realised value, None where it is unknown (no update then)."""
        alpha_min, alpha_max = settings.bounds(self.target_miss)
        for target in range(start, end):
            for h in range(self.horizon):
                entry = self.published.get(target - h)
                if entry is None:
                    continue
                keys, q = entry
                for j, key in enumerate(keys):
                    y = actual(key, target)
                    if y is None:
                        continue
                    a = self.alpha.setdefault(key, np.full(self.horizon, self.target_miss))
                    a[h] = float(
                        aci_step(
                            a[h],
                            1.0 if y > q[h, j] else 0.0,
                            target_miss=self.target_miss,
                            gamma=settings.gamma,
                            alpha_min=alpha_min,
                            alpha_max=alpha_max,
                        )
                    )
        for origin in [o for o in self.published if o + self.horizon <= end]:
            del self.published[origin]  # every target of it is scored

    def to_json(self, hour_offset: int) -> dict[str, Any]:
        return {
            "target_miss": self.target_miss,
            "horizon": self.horizon,
            "alpha": [[list(k), a.tolist()] for k, a in sorted(self.alpha.items())],
            "published": [
                [origin + hour_offset, [list(k) for k in keys], q.tolist()]
                for origin, (keys, q) in sorted(self.published.items())
            ],
        }

    @staticmethod
    def from_json(data: dict[str, Any], hour_offset: int) -> AciTracker:
        horizon = int(data["horizon"])
        tracker = AciTracker(float(data["target_miss"]), horizon)
        for key, a in data["alpha"]:
            tracker.alpha[tuple(key)] = np.asarray(a, dtype=np.float64)
        for origin, keys, q in data["published"]:
            arr = np.asarray(q, dtype=np.float64).reshape(horizon, len(keys))
            tracker.published[int(origin) - hour_offset] = (tuple(tuple(k) for k in keys), arr)
        return tracker


def _level_key(p: float) -> str:
    return f"{p:.6g}"


@dataclass(slots=True)
class OnlineCalibration:
    """The online state of one forecaster: tenants' q_p and each pool quantile asked for.

    `through` is the end hour of the last `observe` (every target before it is scored). Hours are
    the forecaster's own indices; `to_json(hour_offset)` stores them shifted (the stream stores
    absolute hours, because its series' first hour moves when old history is dropped).
    """

    settings: OnlineSettings
    p: float
    horizon: int
    series: AciTracker = field(init=False)
    pools: dict[str, AciTracker] = field(default_factory=dict)
    through: int | None = None

    def __post_init__(self) -> None:
        self.series = AciTracker(1.0 - self.p, self.horizon)

    def pool_tracker(self, p: float) -> AciTracker:
        key = _level_key(p)
        tracker = self.pools.get(key)
        if tracker is None:
            tracker = self.pools[key] = AciTracker(1.0 - p, self.horizon)
        return tracker

    def observe(
        self,
        end_hour: int,
        series_actual: Callable[[tuple[str, ...], int], float | None],
        pool_actual: Callable[[tuple[str, ...], int], float | None],
    ) -> None:
        """Score what completed before `end_hour`. Asked about an earlier hour than last time
        (the history was rewound), the state is dropped: it holds outcomes after that origin, and
        using them would leak the future into the forecast."""
        if self.through is not None and end_hour < self.through:
            self.reset()
        if self.through is None:
            self.through = end_hour
            return
        self.series.observe(self.through, end_hour, series_actual, self.settings)
        for tracker in self.pools.values():
            tracker.observe(self.through, end_hour, pool_actual, self.settings)
        self.through = end_hour

    def reset(self) -> None:
        self.series = AciTracker(1.0 - self.p, self.horizon)
        self.pools = {}
        self.through = None

    def to_json(self, hour_offset: int = 0) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "p": self.p,
            "horizon": self.horizon,
            "through": None if self.through is None else self.through + hour_offset,
            "series": self.series.to_json(hour_offset),
            "pools": {k: t.to_json(hour_offset) for k, t in sorted(self.pools.items())},
        }

    @staticmethod
    def from_json(data: dict[str, Any], settings: OnlineSettings, hour_offset: int = 0) -> OnlineCalibration:
        if data.get("format") != STATE_FORMAT:
            raise ValueError(f"unsupported online calibration state format {data.get('format')!r}")
        state = OnlineCalibration(settings, float(data["p"]), int(data["horizon"]))
        through = data["through"]
        state.through = None if through is None else int(through) - hour_offset
        state.series = AciTracker.from_json(data["series"], hour_offset)
        state.pools = {k: AciTracker.from_json(v, hour_offset) for k, v in data["pools"].items()}
        return state


def quantile_at_levels(residuals: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Column j's linearly interpolated quantile at levels[j], residuals [n, m] (n >= 1).

    The same interpolation as np.quantile(method="linear") (position level * (n - 1)), with a
    level per column, so at level p it reproduces `residual_quantile`.
    """
    r = np.sort(np.asarray(residuals, dtype=np.float64), axis=0)
    n, m = r.shape
    pos = np.clip(np.asarray(levels, dtype=np.float64), 0.0, 1.0) * (n - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    cols = np.arange(m)
    below = r[lo, cols]
    return np.asarray(below + (pos - lo) * (r[hi, cols] - below), dtype=np.float64)
