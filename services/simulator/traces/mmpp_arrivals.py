"""The arrival process of the MMPP trace generator (services/simulator/traces/mmpp.py's module doc):
a Poisson process whose rate is the product of a slow, day-scale regime chain shared by the pools
of a job type and a fast on/off chain per pool, times the hour-of-day index and the weekday factor."""

from __future__ import annotations

import numpy as np

from gfs.services.simulator.traces.mmpp_config import MmppConfig

DAY_S = 86400.0
HOUR_S = 3600.0


# ----- arrival process ----------------------------------------------------------------------------
def stationary(sojourn: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Stationary distribution of the chain that stays `sojourn[i]` on average in state i and
    then jumps to j != i with probability proportional to weights[j]."""
    k = sojourn.size
    if k == 1:
        return np.ones(1)
    q = np.zeros((k, k))
    for i in range(k):
        others = weights.astype(float).copy()
        others[i] = 0.0
        if others.sum() > 0:
            q[i] = others / others.sum() / sojourn[i]
            q[i, i] = -q[i].sum()
    a = np.vstack([q.T, np.ones(k)])
    b = np.zeros(k + 1)
    b[-1] = 1.0
    pi = np.linalg.lstsq(a, b, rcond=None)[0]
    return np.asarray(np.clip(pi, 0.0, None) / np.clip(pi, 0.0, None).sum(), dtype=float)


def modulator_levels(levels: tuple[float, ...], sojourn: np.ndarray, weights: np.ndarray,
                     burstiness: float) -> np.ndarray:  # fmt: skip
    """Levels ** burstiness, rescaled so the chain's stationary mean level is 1 (the knob changes
    how bursty arrivals are, never how many there are on average)."""
    lv = np.asarray(levels, dtype=float) ** burstiness
    return np.asarray(lv / (stationary(sojourn, weights) @ lv), dtype=float)


def modulator_path(
    rng: np.random.Generator, levels: np.ndarray, sojourn_s: np.ndarray, weights: np.ndarray,
    start: float, grid: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """The chain's level at each time of `grid` (sorted, >= start), starting from its stationary law."""
    k = levels.size
    if k == 1:
        return np.full(grid.size, levels[0])
    state = int(rng.choice(k, p=stationary(sojourn_s, weights)))
    times, states = [start], [state]
    t, end = start, float(grid[-1]) if grid.size else start
    while t <= end:
        t += float(rng.exponential(sojourn_s[state]))
        others = weights.astype(float).copy()
        others[state] = 0.0
        if others.sum() <= 0:
            break
        state = int(rng.choice(k, p=others / others.sum()))
        times.append(t)
        states.append(state)
    idx = np.searchsorted(np.asarray(times), grid, side="right") - 1
    return np.asarray(levels[np.asarray(states)[idx]], dtype=float)


def profile(config: MmppConfig, kind: str, grid: np.ndarray) -> np.ndarray:
    """Hour-of-day index x weekday factor at each time (both normalised to mean 1)."""
    hour = np.asarray(config.hour_index, dtype=float)
    week = np.asarray(config.hp_weekday if kind == "HP" else config.spot_weekday, dtype=float)
    h = (np.mod(grid, DAY_S) // HOUR_S).astype(np.int64)
    d = np.mod(np.floor(grid / DAY_S), 7).astype(np.int64)
    return np.asarray((hour / hour.mean())[h] * (week / week.mean())[d], dtype=float)


def _slow(config: MmppConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    sojourn = np.asarray(config.slow_sojourn_days, dtype=float) * DAY_S
    weights = np.asarray(config.slow_jump_weights, dtype=float)
    return modulator_levels(config.slow_levels, sojourn, weights, config.burstiness), sojourn, weights


def _fast(config: MmppConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    sojourn = np.asarray(config.fast_sojourn_hours, dtype=float) * HOUR_S
    weights = np.asarray(config.fast_jump_weights, dtype=float)
    return modulator_levels(config.fast_levels, sojourn, weights, config.burstiness), sojourn, weights


def sample_arrivals(
    rng: np.random.Generator, shape: np.ndarray, grid_start: float, rate: float, mean_batch: float
) -> np.ndarray:
    """Integer submit seconds of a Poisson process with rate `rate` x shape[i] (jobs/s) in minute i
    from grid_start; events bring 1 + Geometric extra jobs in the same second (mean `mean_batch`)."""
    events = rng.poisson(rate * 60.0 * shape / mean_batch)
    minute = np.repeat(np.arange(shape.size), events)
    t = np.floor(grid_start + (minute + rng.random(minute.size)) * 60.0)
    batch = rng.geometric(1.0 / mean_batch, t.size) if mean_batch > 1 else np.ones(t.size, dtype=np.int64)
    return np.sort(np.repeat(t, batch))
