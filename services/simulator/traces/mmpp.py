"""A second GFS-format trace generator: Markov-modulated Poisson arrivals, load set per pool.

Written apart from the calibrated generator (`synthetic.py`) so a policy's defaults can be tried on
a workload they were not tuned on. What differs, model by model:

* **Arrivals**: a Poisson process whose rate is a product of two Markov-modulated levels (a slow,
  day-scale regime chain shared by every pool of a job type, and a fast on/off chain per pool),
  the hour-of-day index and the weekday factor. `burstiness` scales the chains' log-levels.
  (synthetic.py: a replay of the 184-day block profile with AR(1) day noise and hour noise.)
* **Start**: arrivals begin `burn_in_days` before t = 0 and whatever still runs at t = 0 becomes
  the t = 0 population (submit 0, remaining duration): a stationary start.
* **Load**: set per pool. Candidates arrive at a multiple of the needed rate and a uniformly random
  subset whose requested GPU-time meets `hp_load` x the pool's capacity is kept (spot: the
  cluster-wide `spot_load` spread over the pools in the published proportions), so load is a
  direct knob for any inventory. (synthetic.py: fixed arrival rates, then per-model
  durations stretched to the published load.)
* **Sizes**: gpu_request from the type's published value counts, restricted to what the pool's
  nodes can hold (fractions only on 1-GPU-node pools), exponentially tilted to the pool's
  published median; workers from the published worker pmf itself (multi-worker share per type),
  with no per-model fitting; `wide_gang_share` adds whole-node wide gangs, `odd_size_share`
  non-power-of-two sizes (fragmentation).
* **Durations**: the type's published quantiles interpolated log-linearly, moved per
  (type, model) to the published median and stretched above it to the published mean.

Every random draw comes from a stream keyed by (seed, job type, pool name), so a trace is a pure
function of its config and node inventory, and removing a pool leaves the others' HP jobs
unchanged (their spot jobs change: the cluster-wide spot load is spread over the pools present).
"""

from __future__ import annotations

import functools
import json
import math
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from services.simulator.traces import mmpp_tables as tables
from services.simulator.traces.columns import JobColumns
from services.simulator.traces.gfs_format import NODE_FILE, write_nodes
from services.simulator.traces.mmpp_config import MmppConfig
from services.simulator.traces.records import Trace, TraceNode
from services.simulator.traces.synth_orgs import MODELS, ORG_PROFILE

GENERATOR_FILE = "generator.json"
GENERATOR_NAME = "gfs-mmpp"
GENERATOR_VERSION = 1
DAY_S = 86400.0
HOUR_S = 3600.0
KINDS: tuple[str, ...] = ("HP", "SPOT")
_KIND_CODE = {"HP": 1, "SPOT": 2}
_MAX_RATE_TRIES = 8
_PILOT_JOBS = 4096


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


@dataclass(frozen=True, slots=True)
class MmppResult:
    columns: JobColumns  # sorted by submit time; job i is named str(i)
    nodes: tuple[TraceNode, ...]
    horizon_s: float
    # kind -> pool -> realised load (requested GPU-time / capacity over the kind's load span)
    loads: dict[str, dict[str, float]]
    candidates: dict[str, dict[str, int]]  # kind -> pool -> candidate jobs drawn (before thinning)

    def to_trace(self) -> Trace:
        return Trace(nodes=self.nodes, jobs=self.columns.to_jobs(), horizon_s=self.horizon_s, source="mmpp")


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
    return {"gpu": gpu, "workers": workers, "duration": duration, "org": org, "cpu": cpu, "wide": wide}


# ----- per pool: candidates, then the subset that meets the load ----------------------------------
def _overlap(submit: np.ndarray, duration: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return np.asarray(np.clip(np.minimum(submit + duration, hi) - np.maximum(submit, lo), 0.0, None))


def _stream(config: MmppConfig, kind: str, key: str) -> np.random.Generator:
    """A generator keyed by (seed, kind, key): independent of every other pool's draws."""
    return np.random.default_rng(
        np.random.SeedSequence([config.seed, _KIND_CODE[kind], zlib.crc32(key.encode())])
    )


def spot_weights(pools: tuple[Pool, ...], published: bool) -> dict[str, float]:
    """Each pool's spot load / the cluster's: the published per-GPU Spot GPU-time of its model
    (mmpp_tables.SPOT_JOBS), normalised so the capacity-weighted mean is 1 (a model without
    published figures gets the mean); all 1 when not `published`."""
    known = {
        m: tables.SPOT_JOBS[m] * tables.MEAN_DURATION_H["SPOT"][m] / tables.FLEET_GPUS[m]
        for m in tables.SPOT_JOBS
    }
    if not published or not pools:
        return {p.name: 1.0 for p in pools}
    present = [p for p in pools if p.name in known]
    fallback = (
        sum(known[p.name] * p.capacity for p in present) / sum(p.capacity for p in present)
        if present
        else 1.0
    )
    raw = {p.name: known.get(p.name, fallback) for p in pools}
    scale = sum(p.capacity for p in pools) / sum(raw[p.name] * p.capacity for p in pools)
    return {name: w * scale for name, w in raw.items()}


def _pool_jobs(
    config: MmppConfig, kind: str, pool: Pool, slow: np.ndarray, grid: np.ndarray, load: float
) -> tuple[dict[str, np.ndarray], float, int]:
    """The kind's jobs on `pool` at `load`, their realised load, and how many candidates were drawn."""
    horizon = config.days * DAY_S
    lo = (config.load_start_day if kind == "HP" else config.spot_start_day) * DAY_S
    target = load * pool.capacity * (horizon - lo)
    empty = {k: np.zeros(0) for k in ("submit", "gpu", "workers", "duration", "org", "cpu")}
    if target <= 0 or grid.size == 0:
        return empty, 0.0, 0
    rng_marks = _stream(config, kind, f"marks:{pool.name}")
    rng_arrivals = _stream(config, kind, f"arrivals:{pool.name}")
    levels, sojourn, weights = _fast(config)
    shape = slow * modulator_path(rng_arrivals, levels, sojourn, weights, float(grid[0]), grid)
    shape = shape * profile(config, kind, grid)
    span = float(grid[-1] + 60.0 - grid[0])
    # Rate from a pilot sample: the mean GPU-time a job arriving anywhere in the span adds to [lo, T).
    pilot = draw_marks(config, kind, pool, _PILOT_JOBS, _stream(config, kind, f"pilot:{pool.name}"))
    pilot_t = grid[0] + _stream(config, kind, f"pilot-t:{pool.name}").random(_PILOT_JOBS) * span
    per_job = float(
        np.mean(pilot["gpu"] * pilot["workers"] * _overlap(pilot_t, pilot["duration"], lo, horizon))
    )
    rate = config.candidate_margin * target / max(span * float(shape.mean()) * max(per_job, 1e-9), 1e-12)
    for _ in range(_MAX_RATE_TRIES):
        submit = sample_arrivals(rng_arrivals, shape, float(grid[0]), rate, config.mean_batch)
        submit = submit[submit < horizon]
        marks = draw_marks(config, kind, pool, submit.size, rng_marks)
        contrib = marks["gpu"] * marks["workers"] * _overlap(submit, marks["duration"], lo, horizon)
        total = float(contrib.sum())
        if total >= target:
            break
        # Too few (a heavy-tailed pilot under-shoots now and then): more candidates, same streams.
        rate *= config.candidate_margin * target / max(total, 1e-9 * target)
    # Keep a uniformly random subset whose GPU-time is closest to the target: uniform thinning of
    # a modulated Poisson process is the same process at a lower rate. Every job the trace would
    # hold (still running at t = 0 or later) takes part, also those that add nothing to the load
    # span, so the part of the trace before the span is thinned alike.
    live = np.flatnonzero(submit + marks["duration"] > 0)
    order = live[_stream(config, kind, f"select:{pool.name}").permutation(live.size)]
    cum = np.cumsum(contrib[order])
    k = int(np.argmin(np.abs(cum - target))) + 1 if cum.size else 0
    keep = np.sort(order[:k])
    jobs = {name: values[keep] for name, values in marks.items() if name != "wide"}
    jobs["submit"] = submit[keep]
    realised = float(cum[k - 1]) / (pool.capacity * (horizon - lo)) if k else 0.0
    return jobs, realised, int(submit.size)


def pools_of(nodes: tuple[TraceNode, ...]) -> tuple[Pool, ...]:
    by_model: dict[str, list[TraceNode]] = {}
    for n in nodes:
        if n.gpus > 0:
            by_model.setdefault(n.gpu_model, []).append(n)
    return tuple(
        Pool(name, tuple(n.gpus for n in ns), min(n.cpus for n in ns))
        for name, ns in sorted(by_model.items())
    )


def generate_mmpp(config: MmppConfig, nodes: tuple[TraceNode, ...]) -> MmppResult:
    """The trace for `config` over `nodes`: HP and spot jobs on every pool (GPU model) they have."""
    horizon = config.days * DAY_S
    pools = pools_of(nodes)
    parts: list[dict[str, np.ndarray]] = []
    loads: dict[str, dict[str, float]] = {k: {} for k in KINDS}
    candidates: dict[str, dict[str, int]] = {k: {} for k in KINDS}
    weights_spot = spot_weights(pools, config.spot_published_mix)
    for kind in KINDS:
        start = -config.burn_in_days * DAY_S if kind == "HP" else config.spot_start_day * DAY_S
        grid = start + 60.0 * np.arange(math.ceil((horizon - start) / 60.0))
        levels, sojourn, weights = _slow(config)
        slow = modulator_path(_stream(config, kind, "slow"), levels, sojourn, weights, start, grid)
        for p_index, pool in enumerate(pools):
            load = config.hp_load if kind == "HP" else config.spot_load * weights_spot[pool.name]
            jobs, realised, drawn = _pool_jobs(config, kind, pool, slow, grid, load)
            loads[kind][pool.name] = realised
            candidates[kind][pool.name] = drawn
            n = jobs["submit"].size
            jobs["pool"] = np.full(n, p_index, dtype=np.int64)
            jobs["spot"] = np.full(n, kind == "SPOT")
            parts.append(jobs)
    cat = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if parts else {}
    if not cat:
        raise ValueError("the node inventory has no GPU")
    # Jobs from the burn-in still running at t = 0 become the t = 0 population (as the real trace
    # stamps them); every duration is cut at the window end, in whole seconds >= 1.
    end = cat["submit"] + cat["duration"]
    submit = np.maximum(cat["submit"], 0.0)
    duration = np.maximum(1.0, np.ceil(np.minimum(end, horizon) - submit))
    cols = JobColumns(
        models=tuple(p.name for p in pools),
        orgs=tuple(str(r[0]) for r in ORG_PROFILE),
        model=cat["pool"].astype(np.int64),
        org=cat["org"].astype(np.int64),
        is_spot=cat["spot"].astype(bool),
        gpu_request=cat["gpu"].astype(float),
        workers=cat["workers"].astype(np.int64),
        cpu_request=cat["cpu"].astype(float),
        submit_s=submit,
        duration_s=duration,
    ).sorted_by_submit()
    return MmppResult(cols, nodes, horizon, loads, candidates)


def offered_load(cols: JobColumns, nodes: tuple[TraceNode, ...], lo: float, hi: float) -> dict[str, float]:
    """Requested GPU-time over [lo, hi) / (cluster GPUs x (hi - lo)), per job class ("HP", "SPOT"),
    as if every job started on submission: the load the workload offers, before any scheduling."""
    capacity = float(sum(n.gpus for n in nodes))
    if capacity <= 0 or hi <= lo:
        return {"HP": 0.0, "SPOT": 0.0}
    gpu_time = cols.gpus * _overlap(cols.submit_s, cols.duration_s, lo, hi)
    denom = capacity * (hi - lo)
    return {
        "HP": float(gpu_time[~cols.is_spot].sum() / denom),
        "SPOT": float(gpu_time[cols.is_spot].sum() / denom),
    }


def write_mmpp(result: MmppResult, config: MmppConfig, out_dir: Path, *, wall_s: float) -> dict[str, Any]:
    """Write node_info_df.csv, job_info_df.csv and generator.json; return generator.json's content."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_nodes(result.nodes, out_dir / NODE_FILE)
    result.columns.write_job_csv(out_dir)
    cols = result.columns
    meta = {
        "generator": GENERATOR_NAME,
        "version": GENERATOR_VERSION,
        "seed": config.seed,
        "config_sha256": config.digest(),
        "jobs": len(cols),
        "hp_jobs": int((~cols.is_spot).sum()),
        "spot_jobs": int(cols.is_spot.sum()),
        "jobs_at_t0": int((cols.submit_s == 0).sum()),
        "horizon_s": result.horizon_s,
        "realised_load_by_pool": {k: {p: round(v, 4) for p, v in d.items()} for k, d in result.loads.items()},
        "candidates_by_pool": result.candidates,
        "generate_wall_s": round(wall_s, 3),
        "config": config.to_dict(),
    }
    (out_dir / GENERATOR_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta


def synthesize_mmpp(config: MmppConfig, nodes: tuple[TraceNode, ...], out_dir: Path) -> dict[str, Any]:
    """Generate and write a trace; generator.json records the config, its hash and the realised loads."""
    started = time.perf_counter()
    result = generate_mmpp(config, nodes)
    return write_mmpp(result, config, out_dir, wall_s=time.perf_counter() - started)
