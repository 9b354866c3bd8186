"""Small-cluster builders for the baseline tests: a pool, HP / spot tasks placed by hand."""

from __future__ import annotations

from gfs.services.core.decisions import WorkerPlacement
from gfs.services.core.ids import PoolId, TaskId, TenantId
from gfs.services.core.pool import PoolState, RunningTask
from gfs.services.core.task import TaskClass, TaskSpec
from gfs.services.core.victims import PreemptionContext

NOW = 1000.0


def make_pool(*node_gpus: int) -> PoolState:
    return PoolState(PoolId("P"), tuple(f"n{i}" for i in range(len(node_gpus))), tuple(node_gpus))


def spec(tid: str, gpus: float, *, cls: TaskClass = TaskClass.HP, workers: int = 1) -> TaskSpec:
    return TaskSpec(
        task_id=TaskId(tid),
        tenant=TenantId("t"),
        pool=PoolId("P"),
        task_class=cls,
        gpus_per_worker=gpus,
        workers=workers,
        submit_s=0.0,
        duration_s=10_000.0,
    )


def hp(pool: PoolState, tid: str, node: int, gpus: int) -> None:
    pool.add_task(RunningTask(spec(tid, gpus), 0.0, (WorkerPlacement(node, gpus),)))


def spot(pool: PoolState, tid: str, nodes: tuple[int, ...] | int, gpus: int, *, start: float) -> None:
    """A spot task with one worker of `gpus` GPUs on each of `nodes`."""
    nodes = (nodes,) if isinstance(nodes, int) else nodes
    s = spec(tid, gpus, cls=TaskClass.SPOT, workers=len(nodes))
    pool.add_task(RunningTask(s, start, tuple(WorkerPlacement(n, gpus) for n in nodes)))


def ctx(now: float = NOW, failed: int = 0, succeeded: int = 0) -> PreemptionContext:
    return PreemptionContext(
        now=now, failed_periods=failed, succeeded_periods=succeeded, t_win_s=31 * 86400.0
    )
