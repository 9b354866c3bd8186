"""Load shaping after sampling: the A10 HP cap and per-model load matching.

Both act on whole jobs or whole-model duration factors and report what they changed, so a
generated trace says in generator.json how far it departs from the raw sampled workload.
"""

from __future__ import annotations

import math

import numpy as np

from gfs.services.simulator.traces.columns import JobColumns
from gfs.services.simulator.traces.synth_config import GeneratorConfig
from gfs.services.simulator.traces.synth_orgs import MODELS


def a10_cap_keep_mask(
    cols: JobColumns, a10: int, capacity: float, peak_fraction: float, horizon_s: float
) -> np.ndarray:
    """Keep-mask: drop A10 HP jobs (in submit order) that would lift per-minute demand over the cap.

    Uses the HP-demand definition of services/simulator/demand.py (minutes m with
    submit <= 60 m < end), so the demand series of the result never exceeds the cap.
    """
    cap = capacity * peak_fraction + 1e-9
    n_min = math.ceil(horizon_s / 60.0) + 1
    curve = np.zeros(n_min)
    keep = np.ones(len(cols), dtype=bool)
    idx = np.flatnonzero((cols.model == a10) & ~cols.is_spot)
    first = np.ceil(cols.submit_s[idx] / 60.0).astype(np.int64)
    stop = np.minimum(np.ceil((cols.submit_s[idx] + cols.duration_s[idx]) / 60.0).astype(np.int64), n_min)
    gpus = cols.gpus[idx]
    for i, a, b, g in zip(idx.tolist(), first.tolist(), stop.tolist(), gpus.tolist(), strict=True):
        if a >= b:
            continue
        window = curve[a:b]
        if window.max() + g > cap:
            keep[i] = False
        else:
            window += g
    return keep


def match_load(
    config: GeneratorConfig, cat: dict[str, np.ndarray], is_spot: np.ndarray, horizon: float
) -> dict[str, tuple[float, float]]:
    """Scale each model's HP durations (in place in `cat`) to hit the model's load target.

    First the tail draws only; if even the largest factor falls short (long jobs are already cut
    at the window end), then every HP arrival of the model is stretched as well (or shrunk, if
    even the smallest tail factor leaves too much load). Returns
    {model: (tail factor, all-HP factor)}.
    """
    load = config.load
    factors: dict[str, tuple[float, float]] = {}
    if not load.enabled:
        return factors
    remaining = horizon - cat["submit"]
    # Services (inf = until the window end) become their clipped length, so shrinking reaches them.
    cat["duration"] = np.minimum(cat["duration"], remaining)
    gpus = cat["gpu"] * cat["workers"]
    arrival = cat["submit"] > 0  # the t = 0 population is matched separately (InitialConfig)
    for m, model in enumerate(MODELS):
        if model == "A10" and config.a10_cap.enabled:
            continue
        mask = cat["model"] == m
        target = load.load_by_model[m] * load.reference_capacity[m] * config.scale * horizon
        f_tail = _scale_to(
            target, cat["duration"], remaining, gpus, mask, mask & cat["tail"], load.factor_bounds
        )
        f_all, lo, hi = 1.0, load.factor_bounds[0], load.factor_bounds[1]
        hp = mask & ~is_spot & arrival
        if f_tail >= hi * 0.999:  # tails saturated: stretch every HP arrival of the model
            f_all = _scale_to(target, cat["duration"], remaining, gpus, mask, hp, (1.0, hi))
        elif f_tail <= lo * 1.001:  # still too much load: shrink every HP arrival
            f_all = _scale_to(target, cat["duration"], remaining, gpus, mask, hp, (lo, 1.0))
        factors[model] = (round(f_tail, 4), round(f_all, 4))
    return factors


def _scale_to(
    target: float, duration: np.ndarray, remaining: np.ndarray, gpus: np.ndarray, mask: np.ndarray,
    adjust: np.ndarray, bounds: tuple[float, float],
) -> float:  # fmt: skip
    """Find f so sum over `mask` of gpus * min(duration * (f on `adjust`), remaining) = target; apply it."""
    if not adjust.any():
        return 1.0
    rest = mask & ~adjust
    fixed = float((gpus[rest] * np.minimum(duration[rest], remaining[rest])).sum())
    g, d, r = gpus[adjust], duration[adjust], remaining[adjust]
    lo, hi = bounds
    for _ in range(50):  # bisection on log f: the total is non-decreasing in f
        mid = math.sqrt(lo * hi)
        if fixed + float((g * np.minimum(d * mid, r)).sum()) < target:
            lo = mid
        else:
            hi = mid
    f = math.sqrt(lo * hi)
    duration[adjust] = d * f
    return f
