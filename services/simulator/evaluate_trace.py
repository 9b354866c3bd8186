"""The workload of one grid cell: a synthetic trace at a seed and an HP load level, on a cluster
scaled down with the arrivals so that the calibrated load is kept.

- HP load level L keeps each HP job (arrivals and the t = 0 population) with probability L, by
  one uniform draw per HP job from a generator seeded apart from the trace's (seed + 10,000), so
  the levels are nested (the jobs kept at 0.8 are kept at 0.9 too) and L = 1 is the trace itself.
  Spot jobs are untouched, so L < 1 leaves more spare GPUs for spot. Why thinning after
  generation rather than scaling the generator's HP arrival rate: the generator matches each
  model's HP+spot load to the calibrated target by stretching HP durations (synth_adjust), which
  would undo a lower arrival rate.
- `node_fraction` keeps every n-th node of each pool after sorting by (GPUs per node, name), so the
  pool keeps its mix of node sizes (GPU-series-1 has 1-, 4- and 8-GPU nodes).
- Gangs wider than `max_job_share` of their scaled pool are narrowed (fewer workers) to that share:
  the generator's gang sizes are calibrated to the full pools, and on a pool scaled to 1/10 a gang
  asking for most of it would never start and, under head-of-line blocking, would stall the pool
  for the whole run. The number of narrowed jobs is reported with the results.
- A robustness-suite regime (`regime_trace`) names its generator: "synth" goes through the same
  thinning and narrowing; "mmpp" sets its HP load itself and caps its gangs at the same share of
  the pool, so narrowing finds nothing to do there. `pools` keeps only those GPU models' nodes.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from gfs.services.simulator.evaluate_config import Regime, regime_generator
from gfs.services.simulator.traces.columns import JobColumns
from gfs.services.simulator.traces.mmpp import generate_mmpp, offered_load
from gfs.services.simulator.traces.mmpp_config import MmppConfig
from gfs.services.simulator.traces.records import Trace, TraceJob, TraceNode
from gfs.services.simulator.traces.synth_config import GeneratorConfig
from gfs.services.simulator.traces.synthetic import generate


@dataclass(frozen=True, slots=True)
class CellTrace:
    trace: Trace
    generator: GeneratorConfig | MmppConfig
    narrowed_jobs: int
    hp_jobs_thinned: int


def scaled_nodes(nodes: tuple[TraceNode, ...], fraction: float) -> tuple[TraceNode, ...]:
    if fraction >= 1.0:
        return nodes
    step = max(1, round(1.0 / fraction))
    by_pool: dict[str, list[TraceNode]] = defaultdict(list)
    for n in nodes:
        by_pool[n.gpu_model].append(n)
    keep: list[TraceNode] = []
    for pool in sorted(by_pool):
        ordered = sorted(by_pool[pool], key=lambda n: (n.gpus, n.name))
        keep.extend(n for i, n in enumerate(ordered) if i % step == 0)
    return tuple(keep)


def select_pools(nodes: tuple[TraceNode, ...], pools: tuple[str, ...]) -> tuple[TraceNode, ...]:
    """Only the nodes of `pools` (all nodes when empty); a pool with no node is an error."""
    if not pools:
        return nodes
    missing = sorted(set(pools) - {n.gpu_model for n in nodes})
    if missing:
        raise ValueError(f"no node of pool(s) {', '.join(missing)} in the inventory")
    return tuple(n for n in nodes if n.gpu_model in pools)


def thin_hp(trace: Trace, *, seed: int, load: float) -> tuple[Trace, int]:
    """Keep each HP job with probability `load` (nested across levels); returns (trace, dropped)."""
    if load >= 1.0:
        return trace, 0
    is_hp = np.array([j.job_class == "HP" for j in trace.jobs], dtype=bool)
    u = np.random.default_rng(seed + 10_000).random(len(trace.jobs))
    keep = ~is_hp | (u < load)
    jobs = tuple(j for j, k in zip(trace.jobs, keep.tolist(), strict=True) if k)
    return dataclasses.replace(trace, jobs=jobs), int((~keep).sum())


def narrow_gangs(trace: Trace, max_share: float) -> tuple[Trace, int]:
    capacity: dict[str, int] = defaultdict(int)
    for n in trace.nodes:
        capacity[n.gpu_model] += n.gpus
    jobs: list[TraceJob] = []
    narrowed = 0
    for j in trace.jobs:
        limit = max_share * capacity.get(j.gpu_model, 0)
        if j.workers > 1 and j.total_gpus > limit:
            workers = max(1, math.floor(limit / max(j.gpus_per_worker, 1e-9)))
            if workers < j.workers:
                j = dataclasses.replace(j, workers=workers)
                narrowed += 1
        jobs.append(j)
    return dataclasses.replace(trace, jobs=tuple(jobs)), narrowed


def with_guarantee_hours(trace: Trace, hours: int) -> Trace:
    jobs = tuple(
        dataclasses.replace(j, guarantee_hours=hours) if j.job_class == "SPOT" else j for j in trace.jobs
    )
    return dataclasses.replace(trace, jobs=jobs)


def cell_trace(
    base: GeneratorConfig, nodes: tuple[TraceNode, ...], *, seed: int, load: float, max_job_share: float
) -> CellTrace:
    config = dataclasses.replace(base, seed=seed)
    trace, thinned = thin_hp(generate(config, nodes).to_trace(), seed=seed, load=load)
    trace, narrowed = narrow_gangs(trace, max_job_share)
    return CellTrace(trace, config, narrowed, thinned)


def regime_trace(
    regime: Regime, nodes: tuple[TraceNode, ...], *, seed: int, max_job_share: float
) -> CellTrace:
    """The trace of a suite regime (frozen: every generator parameter explicit) at `seed`, over
    the full inventory `nodes` (the regime's node fraction and pools are applied here)."""
    fraction = 1.0 if regime.node_fraction is None else regime.node_fraction
    cluster = select_pools(scaled_nodes(nodes, fraction), regime.pools)
    config = regime_generator(regime, seed)
    if isinstance(config, GeneratorConfig):
        return cell_trace(config, cluster, seed=seed, load=regime.load, max_job_share=max_job_share)
    # The mmpp generator caps its gangs itself; its giant gangs (issue 35) are meant to be wider
    # than the cap, so they are narrowed only past the share they were drawn up to.
    share = (
        max(max_job_share, config.giant_gang_pool_share[1]) if config.giant_gang_share > 0 else max_job_share
    )
    trace, narrowed = narrow_gangs(generate_mmpp(config, cluster).to_trace(), share)
    return CellTrace(trace, config, narrowed, 0)


def window_load(trace: Trace, start_s: float, end_s: float) -> dict[str, float]:
    """HP and spot load the trace offers over [start_s, end_s): requested GPU-time as if every job
    started on submission / (cluster GPUs x the span). The same for every policy of a cell."""
    return offered_load(JobColumns.from_trace(trace), trace.nodes, start_s, end_s)
