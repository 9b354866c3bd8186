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

Parts: this module draws and thins the jobs per pool and writes the trace; mmpp_arrivals.py is the
arrival process, mmpp_marks.py what each arrival gets (size, workers, duration, organisation),
mmpp_config.py the settings and mmpp_tables.py the published values.
"""

from __future__ import annotations

import json
import math
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gfs.services.simulator.traces import mmpp_tables as tables
from gfs.services.simulator.traces.columns import JobColumns
from gfs.services.simulator.traces.gfs_format import NODE_FILE, write_nodes
from gfs.services.simulator.traces.mmpp_arrivals import (
    DAY_S,
    _fast,
    _slow,
    modulator_path,
    profile,
    sample_arrivals,
)
from gfs.services.simulator.traces.mmpp_config import MmppConfig
from gfs.services.simulator.traces.mmpp_marks import Pool, draw_marks
from gfs.services.simulator.traces.records import Trace, TraceNode
from gfs.services.simulator.traces.synth_orgs import ORG_PROFILE

GENERATOR_FILE = "generator.json"
GENERATOR_NAME = "gfs-mmpp"
GENERATOR_VERSION = 1
KINDS: tuple[str, ...] = ("HP", "SPOT")
_KIND_CODE = {"HP": 1, "SPOT": 2}
_MAX_RATE_TRIES = 8
_PILOT_JOBS = 4096


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
