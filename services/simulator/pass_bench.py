"""`gfs bench pass`: the time of one scheduling pass as a function of the queue's length.

The scenario (seeded, so two runs see the same passes): one pool shaped like the inventory's
largest by GPUs (432 nodes of 8 GPUs), filled to about 80% by running HP and spot tasks, then
`queued` HP and spot tasks of mixed shapes (fractional, 1/2/4/8 GPUs per worker, 1 to 4 workers,
guarantee of 1 to 4 hours). A warm-up pass starts what fits; then each measured step is what the
live service sees per event: one running task finishes (GPUs freed, a new capacity version), one
task arrives, one pass runs. Only the pass is timed, in CPU time (the thread's: waiting for a
shared core does not count); `quota_inputs` (the pool's status, which
walks the queued HP demand) is timed apart.

`indexed=False` runs the same scenario on the scanning path (the runtime's debug switch: every
query scans as before issue 23), so one run prints before and after side by side; the decisions
are the same either way (the bench checks it: same outcomes, same simulation metrics).

Not a test: it prints numbers, it does not assert them.
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass

from gfs.services.core.ids import PoolId, TaskId, TenantId
from gfs.services.core.policies.registry import build_policy
from gfs.services.core.pool import PoolState
from gfs.services.core.runtime import PoolRuntime
from gfs.services.core.task import TaskClass, TaskSpec
from gfs.services.simulator.traces.records import Trace, TraceJob, TraceNode

NODES = 432
GPUS_PER_NODE = 8
FILL = 0.8
_SHAPES = (0.5, 1.0, 1.0, 1.0, 2.0, 2.0, 4.0, 8.0)


@dataclass(frozen=True)
class PassTimes:
    queued: int  # tasks queued when the measured passes began
    passes: int
    mean_ms: float
    p50_ms: float
    p99_ms: float
    decisions: int  # starts and evictions over the measured passes
    fill: float  # allocated / capacity after the warm-up pass
    status_ms: float  # one `quota_inputs` (the pool's status) after the measured passes
    fingerprint: int  # hash of every outcome: equal on both paths


def _spec(rng: random.Random, n: int, cls: TaskClass, now: float) -> TaskSpec:
    g = rng.choice(_SHAPES)
    workers = rng.choice((1, 1, 1, 2, 4)) if g >= 1 else 1
    return TaskSpec(
        task_id=TaskId(f"t{n}"),
        tenant=TenantId("bench"),
        pool=PoolId("A100"),
        task_class=cls,
        gpus_per_worker=g,
        workers=workers,
        submit_s=now,
        duration_s=rng.uniform(600.0, 36000.0),
        guarantee_hours=rng.randint(1, 4),
    )


def build(
    queued: int, seed: int = 0, policy: str = "gfs", indexed: bool = True
) -> tuple[PoolRuntime, random.Random, int, float]:
    """The runtime at 80% full with `queued` tasks waiting; returns it, the rng, the next task
    number and the time. The backlog enters over the 24 hours before, oldest first."""
    rng = random.Random(seed)
    names = tuple(f"n{i}" for i in range(NODES))
    state = PoolState(PoolId("A100"), names, (GPUS_PER_NODE,) * NODES)
    rt = PoolRuntime(state, build_policy(policy))
    rt.indexed = indexed
    n = 0
    now = 0.0
    # Fill: submit and start tasks until 80% of the GPUs are allocated (no preemption, no quota).
    while state.allocated_gpus() < FILL * state.capacity:
        cls = TaskClass.HP if rng.random() < 0.5 else TaskClass.SPOT
        rt.submit(_spec(rng, n, cls, now), now)
        n += 1
        rt.schedule(now, preemption_enabled=False, quota_enabled=False)
        now += 1.0
    for tid in list(rt.queued_ids()):  # what did not fit while filling is not part of the backlog
        rt.cancel(tid, now)
    start = now
    for i in range(queued):
        cls = TaskClass.HP if rng.random() < 0.3 else TaskClass.SPOT
        at = start + 86400.0 * i / max(1, queued)
        rt.submit(_spec(rng, n, cls, at), at)
        n += 1
    return rt, rng, n, start + 86400.0


def measure(queued: int, passes: int, seed: int = 0, policy: str = "gfs", indexed: bool = True) -> PassTimes:
    rt, rng, n, now = build(queued, seed, policy, indexed)
    fingerprint = hash(rt.schedule(now).outcomes)  # warm-up: starts what fits now
    fill = rt.state.allocated_gpus() / rt.state.capacity
    size = len(rt.hp) + len(rt.spot)
    times: list[float] = []
    decisions = 0
    for _ in range(passes):
        now += 1.0
        running = sorted(rt.state.running)
        rt.finish(running[rng.randrange(len(running))], now)
        cls = TaskClass.HP if rng.random() < 0.3 else TaskClass.SPOT
        rt.submit(_spec(rng, n, cls, now), now)
        n += 1
        t0 = time.thread_time()
        result = rt.schedule(now)
        times.append((time.thread_time() - t0) * 1000.0)
        decisions += len(result.outcomes)
        fingerprint = hash((fingerprint, result.outcomes))
    t0 = time.thread_time()
    rt.quota_inputs(now, None)
    status_ms = (time.thread_time() - t0) * 1000.0
    times.sort()
    return PassTimes(
        queued=size,
        passes=passes,
        mean_ms=statistics.fmean(times),
        p50_ms=times[len(times) // 2],
        p99_ms=times[min(len(times) - 1, int(0.99 * len(times)))],
        decisions=decisions,
        fill=fill,
        status_ms=status_ms,
        fingerprint=fingerprint,
    )


def backlog_trace(queued: int, seed: int = 0) -> Trace:
    """A trace whose backlog reaches about `queued` tasks: the same pool, a first wave that fills
    it, then `queued` HP and spot jobs of the same mixed shapes arriving within an hour (far more
    than the pool holds), each running 1 to 10 hours; the simulation drains it."""
    rng = random.Random(seed)
    nodes = tuple(TraceNode(f"n{i}", "A100", GPUS_PER_NODE, 96) for i in range(NODES))
    jobs = []
    for i in range(int(queued * 1.1)):
        g = rng.choice(_SHAPES)
        jobs.append(
            TraceJob(
                name=f"j{i:06d}",
                organization="bench",
                gpu_model="A100",
                cpu_request=1.0,
                gpus_per_worker=g,
                workers=rng.choice((1, 1, 1, 2, 4)) if g >= 1 else 1,
                submit_s=rng.uniform(0.0, 3600.0),
                duration_s=rng.uniform(3600.0, 36000.0),
                job_class="HP" if rng.random() < 0.3 else "SPOT",
                guarantee_hours=rng.choice((1, 2, 4)),
            )
        )
    jobs.sort(key=lambda j: (j.submit_s, j.name))
    horizon = max(j.submit_s + j.duration_s for j in jobs)
    return Trace(nodes=nodes, jobs=tuple(jobs), horizon_s=horizon, source="bench-backlog")


@dataclass(frozen=True)
class SimTimes:
    jobs: int
    events: int
    wall_s: float
    cpu_s: float  # the process's CPU time (the machine is shared: wall time waits for the cores)
    metrics: dict[str, object]  # the policy result's metrics: equal on both paths


def simulate(queued: int, seed: int = 0, policy: str = "gfs", indexed: bool = True) -> SimTimes:
    """Wall time of one simulation of `backlog_trace(queued)` (loading excluded)."""
    from gfs.services.simulator.result import build_policy_result
    from gfs.services.simulator.runner import RunSettings, build_simulation, prepare

    trace = backlog_trace(queued, seed)
    settings = RunSettings(seed=seed)
    workload, demand = prepare(trace, settings)
    sim = build_simulation(workload, demand, build_policy(policy), settings)
    for rt in sim.pools.values():
        rt.indexed = indexed
    t0, c0 = time.perf_counter(), time.process_time()
    sim.run(None)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    metrics = dict(build_policy_result(sim).metrics)
    metrics.pop("sim_wall_s", None)  # the one metric that is not a decision's consequence
    return SimTimes(len(trace.jobs), int(metrics["events"]), wall, cpu, metrics)
