"""The demand-side indexes of issue 23 item 4, worked by hand: the pool's free-slot counts per
worker size (`PoolState.whole_slots`), the refusal `place_task` reads from them without asking the
node chooser, and the queue's gang list behind the reservation's holder (`BucketQueue.oldest_gang`).
"""

from __future__ import annotations

import random

from builders import a_pool, a_spot, a_task

from services.core.decisions import WorkerPlacement
from services.core.placement import BestFit, place_task
from services.core.pool import PoolState, RunningTask
from services.core.queues import BucketQueue, LargestFirst
from services.core.reservation import pick_holder
from services.core.task import TaskClass


def test_whole_slots_count_the_workers_the_free_gpus_hold_and_follow_every_change() -> None:
    pool = a_pool(8, 4, 2, 1)
    # All free: k=1 -> 8+4+2+1 = 15; k=2 -> 4+2+1+0 = 7; k=4 -> 2+1 = 3; k=8 -> 1.
    assert [pool.whole_slots(k) for k in (1, 2, 4, 8)] == [15, 7, 3, 1]
    # 3 GPUs taken on n0: free (5, 4, 2, 1): k=2 -> 2+2+1+0 = 5; k=4 -> 1+1 = 2; k=8 -> 0.
    pool.add_task(RunningTask(a_task("h", gpus=3), 0.0, (WorkerPlacement(0, 3),)))
    assert [pool.whole_slots(k) for k in (1, 2, 4, 8)] == [12, 5, 2, 0]
    # A fractional worker opens n3's only GPU: free (5, 4, 2, 0).
    pool.add_task(RunningTask(a_spot("f", gpus=0.5), 0.0, (WorkerPlacement(3, 0, 14, 0.5),)))
    assert pool.whole_slots(1) == 11
    # n1 goes down (it is empty): free (5, 0, 2, 0): k=2 -> 2+1 = 3; k=4 -> 1.
    pool.set_online(1, False)
    assert [pool.whole_slots(k) for k in (1, 2, 4)] == [7, 3, 1]
    pool.set_online(1, True)
    pool.remove_task("h")
    pool.remove_task("f")
    assert [pool.whole_slots(k) for k in (1, 2, 4, 8)] == [15, 7, 3, 1]
    # Inside a journaled pass too: the rollback gives the GPUs back.
    pool.begin()
    pool.add_task(RunningTask(a_task("g", gpus=8), 0.0, (WorkerPlacement(0, 8),)))
    assert pool.whole_slots(8) == 0
    pool.rollback()
    assert pool.whole_slots(8) == 1
    # A node that joins adds its slots.
    pool.add_node("n4", 8)
    assert pool.whole_slots(8) == 2


class _Refusing(BestFit):
    """A chooser that must not be asked (the index already knows nothing fits)."""

    def fill(self, pool: PoolState, gpus: int, cls: TaskClass, workers: int) -> list[tuple[int, int]] | None:
        raise AssertionError(f"the chooser was asked for {workers} x {gpus} GPUs")


def test_place_task_refuses_from_the_index_when_too_few_slots_exist() -> None:
    # Two 4-GPU nodes: 2 slots of 4 GPUs, 1 of 8 nowhere. 3 workers x 4 GPUs and 1 x 8 GPUs cannot
    # fit on any nodes, whichever node the chooser would pick: no node scan is needed.
    pool = a_pool(4, 4)
    assert place_task(pool, a_task("w3", gpus=4, workers=3), _Refusing()) is None
    assert place_task(pool, a_task("big", gpus=8), _Refusing()) is None
    # 2 workers of 4 GPUs fit: the chooser is asked and places one per node.
    assert place_task(pool, a_task("w2", gpus=4, workers=2), BestFit()) == (
        WorkerPlacement(0, 4),
        WorkerPlacement(1, 4),
    )


def _queue_with(entries: list[tuple[str, int, float]]) -> BucketQueue:
    queue = BucketQueue(LargestFirst())
    for tid, workers, at in entries:
        queue.push(a_task(tid, gpus=2, workers=workers, submit=at), at)
    return queue


def test_oldest_gang_is_the_longest_waiting_gang_past_the_wait() -> None:
    # Entered: s1 (1 worker) at 0, g2 (2 workers) at 100, g3 (4) at 100, s4 (1) at 200, g5 (2) at 300.
    queue = _queue_with(
        [("s1", 1, 0.0), ("g2", 2, 100.0), ("g3", 4, 100.0), ("s4", 1, 200.0), ("g5", 2, 300.0)]
    )
    assert list(queue.gangs) == ["g2", "g3", "g5"]
    # At 1000 with a 600 s wait: g2 and g3 waited 900 s (tie on time: the smaller id, g2); g5 700 s.
    holder = queue.oldest_gang(1000.0, 600.0)
    assert holder is not None and holder.task_id == "g2"
    # At 1000 with a 950 s wait nobody qualifies (s1 waited 1000 s but is not a gang).
    assert queue.oldest_gang(1000.0, 950.0) is None
    # g2 leaves and comes back (a requeue): it enters again at 1000, behind g5.
    queue.remove("g2")
    queue.push(a_task("g2", gpus=2, workers=2, submit=100.0), 1000.0)
    assert list(queue.gangs) == ["g3", "g5", "g2"]
    holder = queue.oldest_gang(1000.0, 600.0)
    assert holder is not None and holder.task_id == "g3"


def test_oldest_gang_answers_as_the_full_scan_on_random_queues() -> None:
    for seed in range(300):
        rng = random.Random(seed)
        queue = BucketQueue(LargestFirst())
        now = 0.0
        for n in range(rng.randint(0, 60)):
            now += rng.choice((0.0, 0.0, 10.0, 600.0))
            if queue.index and rng.random() < 0.3:
                queue.remove(rng.choice(sorted(queue.index)))
                continue
            gpus = rng.choice((0.5, 1.0, 2.0, 8.0))
            queue.push(a_task(f"t{n:03d}", gpus=gpus, workers=rng.randint(1, 3), submit=now), now)
        for after in (0.0, 300.0, 1200.0, 1e9):
            assert queue.oldest_gang(now, after) == pick_holder(queue, now, after), seed
