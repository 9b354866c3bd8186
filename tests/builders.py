"""Builders with defaults for everything: tasks, pools (clusters of one GPU model), traces."""

from __future__ import annotations

from gfs.services.core.decisions import WorkerPlacement
from gfs.services.core.ids import PoolId, TaskId, TenantId
from gfs.services.core.pool import PoolState, RunningTask
from gfs.services.core.task import TaskClass, TaskSpec
from gfs.services.simulator.traces.records import Trace, TraceJob, TraceNode

HP = TaskClass.HP
SPOT = TaskClass.SPOT


def a_task(
    task_id: str = "t1",
    *,
    cls: TaskClass = HP,
    gpus: float = 1,
    workers: int = 1,
    submit: float = 0.0,
    duration: float = 3600.0,
    pool: str = "P",
    tenant: str = "org",
    guarantee_hours: int = 1,
    checkpoint_s: float = 3600.0,
) -> TaskSpec:
    return TaskSpec(
        task_id=TaskId(task_id),
        tenant=TenantId(tenant),
        pool=PoolId(pool),
        task_class=cls,
        gpus_per_worker=float(gpus),
        workers=workers,
        submit_s=submit,
        duration_s=duration,
        guarantee_hours=guarantee_hours,
        checkpoint_interval_s=checkpoint_s,
    )


def a_spot(task_id: str = "s1", **kw: object) -> TaskSpec:
    return a_task(task_id, cls=SPOT, **kw)  # type: ignore[arg-type]


def a_pool(*node_gpus: int, pool: str = "P") -> PoolState:
    """A pool with one node per argument (its GPU count); default 2 nodes of 8 GPUs."""
    gpus = node_gpus or (8, 8)
    return PoolState(PoolId(pool), tuple(f"n{i}" for i in range(len(gpus))), tuple(gpus))


def run_on(pool: PoolState, spec: TaskSpec, *nodes_gpus: tuple[int, int], start: float = 0.0) -> PoolState:
    """Put `spec` on the pool as running: (node, whole GPUs) per placement."""
    pool.add_task(RunningTask(spec, start, tuple(WorkerPlacement(n, g) for n, g in nodes_gpus)))
    return pool


def run_fraction(pool: PoolState, spec: TaskSpec, slot: int, *, start: float = 0.0) -> PoolState:
    node = int(pool.gpu_node[slot])
    pool.add_task(RunningTask(spec, start, (WorkerPlacement(node, 0, slot, spec.gpus_per_worker),)))
    return pool


def a_cluster(**pools: tuple[int, ...]) -> dict[str, PoolState]:
    """Several pools by name: a_cluster(A10=(1, 1), H800=(8,))."""
    return {name: a_pool(*gpus, pool=name) for name, gpus in pools.items()}


def a_node(name: str = "n0", *, model: str = "P", gpus: int = 8, cpus: int = 96) -> TraceNode:
    return TraceNode(name=name, gpu_model=model, gpus=gpus, cpus=cpus)


def a_job(
    name: str = "j1",
    *,
    cls: str = "HP",
    model: str = "P",
    gpus: float = 1,
    workers: int = 1,
    submit: float = 0.0,
    duration: float = 3600.0,
    org: str = "org",
) -> TraceJob:
    return TraceJob(
        name=name,
        organization=org,
        gpu_model=model,
        cpu_request=1.0,
        gpus_per_worker=float(gpus),
        workers=workers,
        submit_s=submit,
        duration_s=duration,
        job_class="HP" if cls == "HP" else "SPOT",
    )


def a_trace(nodes: list[TraceNode], jobs: list[TraceJob], *, horizon: float | None = None) -> Trace:
    ordered = tuple(sorted(jobs, key=lambda j: (j.submit_s, j.name)))
    end = horizon if horizon is not None else max((j.submit_s + j.duration_s for j in jobs), default=0.0)
    return Trace(nodes=tuple(nodes), jobs=ordered, horizon_s=end, source="builder")
