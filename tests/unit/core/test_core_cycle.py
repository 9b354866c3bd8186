"""One scheduling pass (spec 5.3) for gfs and fifo: table-driven over small pools."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from builders import a_pool, a_spot, a_task, run_on

from gfs.services.core.cycle import CycleContext, schedule_pool
from gfs.services.core.decisions import EvictTask, StartTask
from gfs.services.core.policies.registry import build_policy
from gfs.services.core.pool import PoolState
from gfs.services.core.queues import BucketQueue
from gfs.services.core.task import TaskSpec
from gfs.services.core.victims import PreemptionContext


@dataclass(frozen=True)
class CycleCase:
    id: str
    policy: str
    pool: Callable[[], PoolState]
    hp: tuple[TaskSpec, ...] = ()
    spot: tuple[TaskSpec, ...] = ()
    quota: float = 1e9
    in_window: bool = True
    expected: tuple[str, ...] = field(default=())  # "start:<id>", "start*:<id>" (preempted), "evict:<id>"


def _describe(d: EvictTask | StartTask) -> str:
    if isinstance(d, EvictTask):
        return f"evict:{d.task_id}"
    return f"start{'*' if d.preempted else ''}:{d.task_id}"


def _pool_with(
    *running: tuple[TaskSpec, tuple[int, int]], gpus: tuple[int, ...] = (8,)
) -> Callable[[], PoolState]:
    def build() -> PoolState:
        pool = a_pool(*gpus)
        for spec, placement in running:
            run_on(pool, spec, placement)
        return pool

    return build


CASES = [
    CycleCase(
        "hp-then-spot-best-fit",
        "gfs",
        _pool_with(gpus=(8, 8)),
        hp=(a_task("h", gpus=4),),
        spot=(a_spot("s", gpus=8),),
        expected=("start:h", "start:s"),
    ),
    # spot 8 over quota 4: its bucket is skipped without raising the threshold; 2 fits
    CycleCase(
        "spot-over-quota-skipped",
        "gfs",
        _pool_with(gpus=(8, 8)),
        spot=(a_spot("big", gpus=8), a_spot("small", gpus=2)),
        quota=4,
        expected=("start:small",),
    ),
    CycleCase(
        "quota-off-outside-window",
        "gfs",
        _pool_with(gpus=(8, 8)),
        spot=(a_spot("big", gpus=8),),
        quota=4,
        in_window=False,
        expected=("start:big",),
    ),
    # h1 (4) fails -> threshold 4 skips h2 (4); h3 (2) backfills
    CycleCase(
        "threshold-backfills-smaller",
        "gfs",
        _pool_with((a_task("h0", gpus=6), (0, 6))),
        hp=(a_task("h1", gpus=4, submit=0), a_task("h2", gpus=4, submit=1), a_task("h3", gpus=2, submit=2)),
        in_window=False,
        expected=("start:h3",),
    ),
    CycleCase(
        "fifo-head-of-line",
        "fifo",
        _pool_with((a_task("h0", gpus=6), (0, 6))),
        hp=(a_task("h1", gpus=4, submit=0), a_task("h3", gpus=2, submit=2)),
        in_window=False,
        expected=(),
    ),
    CycleCase(
        "gfs-preempts-spot",
        "gfs",
        _pool_with((a_spot("s1", gpus=6), (0, 6))),
        hp=(a_task("h", gpus=4),),
        expected=("evict:s1", "start*:h"),
    ),
    CycleCase(
        "fifo-preempts-spot",
        "fifo",
        _pool_with((a_spot("s1", gpus=6), (0, 6))),
        hp=(a_task("h", gpus=4),),
        expected=("evict:s1", "start*:h"),
    ),
    CycleCase(
        "no-preemption-before-window",
        "gfs",
        _pool_with((a_spot("s1", gpus=6), (0, 6))),
        hp=(a_task("h", gpus=4),),
        in_window=False,
        expected=(),
    ),
    # non-HP capacity 8 on node1 holds 2 workers of 4, the gang needs 3: nothing happens
    CycleCase(
        "gang-hp-atomic",
        "gfs",
        _pool_with((a_task("h0", gpus=8), (0, 8)), (a_spot("s1", gpus=4), (1, 4)), gpus=(8, 8)),
        hp=(a_task("g", gpus=4, workers=3),),
        expected=(),
    ),
    # worker 1 fits on node1's free half, worker 2 evicts s2 there, worker 3 evicts s1 on node0
    CycleCase(
        "gang-hp-evicts-across-nodes",
        "gfs",
        _pool_with((a_spot("s1", gpus=8), (0, 8)), (a_spot("s2", gpus=4), (1, 4)), gpus=(8, 8)),
        hp=(a_task("g", gpus=4, workers=3),),
        expected=("evict:s2", "evict:s1", "start*:g"),
    ),
    CycleCase(
        "spot-never-preempts",
        "gfs",
        _pool_with((a_task("h0", gpus=4), (0, 4)), (a_spot("s0", gpus=4), (0, 4))),
        spot=(a_spot("s", gpus=2),),
        expected=(),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_cycle(case: CycleCase) -> None:
    policy = build_policy(case.policy)
    pool = case.pool()
    hp, spot = BucketQueue(policy.hp_order), BucketQueue(policy.spot_order)
    for spec in case.hp:
        hp.push(spec, spec.submit_s)
    for spec in case.spot:
        spot.push(spec, spec.submit_s)
    ctx = CycleContext(
        now=100.0,
        preemption_enabled=case.in_window,
        quota_enabled=case.in_window,
        quota=dict.fromkeys(range(1, 5), case.quota),
        preemption=PreemptionContext(now=100.0, failed_periods=0, succeeded_periods=0, t_win_s=2678400.0),
        version=0,
    )
    free, hp_gpus, spot_gpus = pool.free.copy(), pool.hp_gpus.copy(), pool.spot_gpus.copy()
    running = dict(pool.running)
    outcome = schedule_pool(pool, hp, spot, policy, ctx)
    assert tuple(_describe(d) for d in outcome.decisions) == case.expected
    # deciding changes nothing
    assert (
        (pool.free == free).all() and (pool.hp_gpus == hp_gpus).all() and (pool.spot_gpus == spot_gpus).all()
    )
    assert pool.running == running
