"""The queue's gang list behind the reservation's holder (`BucketQueue.oldest_gang`, issue 23
item 4), worked by hand and against the full scan it replaces (`reservation.pick_holder`)."""

from __future__ import annotations

import random

from builders import a_task

from gfs.services.core.queues import BucketQueue, LargestFirst
from gfs.services.core.reservation import pick_holder


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
