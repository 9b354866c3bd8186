"""What the MMPP trace generator (services/simulator/traces/mmpp.py's module doc) draws for each
arrival in a pool (`Pool`: one GPU model's nodes): GPUs per worker from the type's published
counts, tilted to the pool's median and restricted to what its nodes hold; workers; odd and wide
sizes; durations from the type's published quantiles; the organisation."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from gfs.services.simulator.traces import mmpp_tables as tables
from gfs.services.simulator.traces.mmpp_arrivals import HOUR_S
from gfs.services.simulator.traces.mmpp_config import MmppConfig
from gfs.services.simulator.traces.synth_orgs import MODELS, ORG_PROFILE


@dataclass(frozen=True, slots=True)
class Pool:
    """One GPU model's nodes, as the generator sees them."""

    name: str
    node_gpus: tuple[int, ...]
    min_cpus: int

    @property
    def capacity(self) -> int:
        return sum(self.node_gpus)

    @property
    def largest(self) -> int:
        return max(self.node_gpus)

    def slots(self, gpus_per_worker: np.ndarray) -> np.ndarray:
        """Workers of each size the empty pool holds at once (the core's feasibility rule:
        fractional workers share any GPU, a whole-GPU worker needs a node with that many)."""
        g = np.asarray(gpus_per_worker, dtype=float)
        nodes = np.asarray(self.node_gpus, dtype=np.int64)
        whole = np.ceil(g - 1e-9).astype(np.int64)
        by_size = {int(k): int((nodes // k).sum()) for k in np.unique(whole[g >= 1.0])}
        out = np.asarray(np.floor(self.capacity / np.maximum(g, 1e-9)), dtype=float)
        for k, n in by_size.items():
            out[(g >= 1.0) & (whole == k)] = n
        return out


# ----- job marks ----------------------------------------------------------------------------------
def gpu_request_pmf(kind: str, pool: Pool) -> tuple[np.ndarray, np.ndarray]:
    """(values, pmf) of gpu_request for `kind` on `pool`: the type's published value counts over
    the values the pool's nodes can hold (fractions only where the largest node has one GPU, where
    the statistics place them), tilted by value ** theta so the pool's published median holds."""
    values = np.asarray(tables.GPU_VALUES, dtype=float)
    counts = np.asarray(tables.GPU_COUNTS[kind], dtype=float)
    ok = (counts > 0) & (values <= pool.largest) & ((values >= 1.0) | (pool.largest == 1))
    values, counts = values[ok], counts[ok]
    median = tables.MEDIAN_GPU_REQUEST.get(pool.name)
    theta = 0.0 if median is None or median not in values else _median_tilt(values, counts, median)
    weights = counts * values**theta
    return values, weights / weights.sum()


def _median_tilt(values: np.ndarray, counts: np.ndarray, median: float) -> float:
    """The smallest |theta| (0.01 steps) at which `median` is a median of counts x values**theta."""

    def miss(theta: float) -> float:
        p = counts * values**theta
        p = p / p.sum()
        below, upto = p[values < median].sum(), p[values <= median].sum()
        return float(max(0.0, below - 0.5) + max(0.0, 0.5 - upto))

    if miss(0.0) == 0.0:
        return 0.0
    best, best_miss = 0.0, miss(0.0)
    for step in range(1, 2001):
        for theta in (step / 100.0, -step / 100.0):
            m = miss(theta)
            if m == 0.0:
                return theta
            if m < best_miss:
                best, best_miss = theta, m
    return best


def odd_sizes(pool: Pool) -> np.ndarray:
    """gpu_request values that are not a power of two and that the pool's nodes can hold: the
    published fractions on 1-GPU-node pools, else 3, 5, 6, 7 up to the largest node."""
    values = np.asarray(tables.GPU_VALUES, dtype=float)
    if pool.largest == 1:
        return np.asarray(values[values < 1.0], dtype=float)
    whole = np.arange(3, pool.largest + 1, dtype=float)
    return np.asarray(whole[np.mod(np.log2(whole), 1.0) != 0], dtype=float)


def _worker_pmf(kind: str, floor: int) -> tuple[np.ndarray, np.ndarray]:
    """Published worker pmf restricted to [floor, the type's largest gang]."""
    w = np.asarray([r[0] for r in tables.WORKER_COUNTS], dtype=np.int64)
    n = np.asarray([r[1] for r in tables.WORKER_COUNTS], dtype=float)
    ok = (w >= floor) & (w <= tables.MAX_WORKERS[kind])
    return w[ok], n[ok] / n[ok].sum()


def _log_knots(kind: str) -> tuple[np.ndarray, np.ndarray]:
    knots = tables.DURATION_KNOTS[kind]
    return np.asarray([k[0] for k in knots]), np.log(np.asarray([k[1] for k in knots]))


@functools.cache
def duration_shape(kind: str, pool_name: str) -> tuple[float, float]:
    """(log median, upper stretch) of the (type, model) duration law: the median is the published
    one, and the stretch a of the upper half (log d = log median + a x the type curve's log
    distance above its median) is solved by bisection so the mean is the published one. Models
    without published values keep the type's own curve (stretch 1)."""
    p, log_x = _log_knots(kind)
    type_median = float(np.interp(0.5, p, log_x))
    median_h = tables.MEDIAN_DURATION_H[kind].get(pool_name)
    mean_h = tables.MEAN_DURATION_H[kind].get(pool_name)
    if median_h is None or mean_h is None:
        return type_median, 1.0
    log_median = math.log(median_h * HOUR_S)
    u = (np.arange(20_000) + 0.5) / 20_000  # midpoint rule over the probability
    excess = np.interp(u, p, log_x) - type_median
    top = log_x[-1]

    def mean(a: float) -> float:
        scaled = np.where(excess > 0, a * excess, excess)
        return float(np.exp(np.clip(log_median + scaled, 0.0, top)).mean())

    lo, hi = 0.05, 4.0
    target = mean_h * HOUR_S
    for _ in range(60):  # the mean grows with a: bisection (clamped at the ends of the range)
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mean(mid) < target else (lo, mid)
    return log_median, 0.5 * (lo + hi)


def duration_quantile(kind: str, pool_name: str, u: np.ndarray) -> np.ndarray:
    """Duration at probability u: the type's knots, log-linear between them, moved to the
    (type, model) median and stretched above it (`duration_shape`); 1 s up to the type's longest."""
    p, log_x = _log_knots(kind)
    log_median, stretch = duration_shape(kind, pool_name)
    excess = np.interp(u, p, log_x) - float(np.interp(0.5, p, log_x))
    log_d = log_median + np.where(excess > 0, stretch * excess, excess)
    return np.asarray(np.exp(np.clip(log_d, 0.0, log_x[-1])), dtype=float)


def org_pmf(kind: str, pool_name: str) -> np.ndarray:
    """P(org | type, pool) over ORG_PROFILE rows: the org's jobs of that type x the share of its
    GPU-seconds on the pool's model (the org x model job table is not published). Spot goes only
    to orgs whose Spot count is published (they submit 96.8 % of Spot jobs)."""
    m = MODELS.index(pool_name) if pool_name in MODELS else None
    jobs = np.asarray([r[1] for r in ORG_PROFILE], dtype=float)
    spot = np.asarray([r[2] or 0 for r in ORG_PROFILE], dtype=float)
    per_type = jobs - spot if kind == "HP" else spot
    share = np.asarray([r[3][m] if m is not None else 1.0 for r in ORG_PROFILE], dtype=float)
    weights = per_type * share
    if weights.sum() <= 0:  # no org of this type uses the model: any org of the type
        weights = per_type
    return np.asarray(weights / weights.sum(), dtype=float)


def draw_marks(
    config: MmppConfig, kind: str, pool: Pool, n: int, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """gpu_request, workers, duration, org and cpu_request of n jobs of `kind` on `pool`."""
    values, pmf = gpu_request_pmf(kind, pool)
    gpu = values[rng.choice(values.size, size=n, p=pmf)]
    odd = odd_sizes(pool)
    if config.odd_size_share > 0 and odd.size:
        redraw = rng.random(n) < config.odd_size_share
        gpu = np.where(redraw, odd[rng.integers(0, odd.size, size=n)], gpu)
    multi_w, multi_p = _worker_pmf(kind, 2)
    multi = rng.random(n) < tables.MULTI_SHARE[kind]
    workers = np.where(multi, multi_w[rng.choice(multi_w.size, size=n, p=multi_p)], 1)
    wide = np.zeros(n, dtype=bool)
    if kind == "HP" and config.wide_gang_share > 0:
        wide_w, wide_p = _worker_pmf(kind, config.wide_gang_min_workers)
        wide = rng.random(n) < config.wide_gang_share
        workers = np.where(wide, wide_w[rng.choice(wide_w.size, size=n, p=wide_p)], workers)
        gpu = np.where(wide, float(pool.largest), gpu)
    cap = np.maximum(1.0, np.floor(config.max_gang_share * pool.slots(gpu)))
    workers = np.minimum(workers, cap).astype(np.int64)
    duration = duration_quantile(kind, pool.name, rng.random(n))
    org = rng.choice(len(ORG_PROFILE), size=n, p=org_pmf(kind, pool.name))
    edges = np.asarray(tables.CPU_PER_GPU_EDGES)
    shares = np.asarray(tables.CPU_PER_GPU_SHARES)
    bucket = rng.choice(shares.size, size=n, p=shares / shares.sum())
    ratio = np.exp(rng.uniform(np.log(edges[bucket]), np.log(edges[bucket + 1])))
    cpu = np.clip(np.round(gpu * ratio), 1, max(1, pool.min_cpus)).astype(float)
    # Issue 35's giant gangs and long HP runs draw last, and only when asked for, so the draws
    # above (and every trace of a config without them) are unchanged.
    if kind == "HP" and config.giant_gang_share > 0 and pool.largest > 1:
        giant = rng.random(n) < config.giant_gang_share
        slots = float(pool.slots(np.asarray([float(pool.largest)]))[0])
        lo, hi = config.giant_gang_pool_share
        want = np.ceil(rng.uniform(lo, hi, size=n) * slots)
        workers = np.where(giant, np.clip(want, 2, slots), workers).astype(np.int64)
        gpu = np.where(giant, float(pool.largest), gpu)
        cpu = np.where(giant, float(max(1, pool.min_cpus)), cpu)
        wide = wide | giant
    if kind == "HP" and config.long_hp_share > 0:
        long_run = rng.random(n) < config.long_hp_share
        lo_d, hi_d = config.long_hp_days
        days = np.exp(rng.uniform(math.log(lo_d), math.log(hi_d), size=n))
        duration = np.where(long_run, days * 86400.0, duration)
    return {"gpu": gpu, "workers": workers, "duration": duration, "org": org, "cpu": cpu, "wide": wide}
