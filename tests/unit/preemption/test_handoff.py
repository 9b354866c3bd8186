"""The in-memory handoff of validated records from the router to the decider of the same instance
(issue 23, item 2): taken once at the record's inbox coordinates, bounded, never for a partition
another instance decides."""

from __future__ import annotations

from typing import Any

from gfs.schemas.envelope import Envelope, wrap
from gfs.schemas.tasks import TaskCancelled
from gfs.services.preemption.router.handoff import Handoff


def _envelope(task: str) -> Envelope[Any]:
    return wrap(TaskCancelled(task_id=task, tenant="org-a"), producer="unit")


def test_a_record_is_taken_once_where_its_ack_put_it() -> None:
    handoff = Handoff(owned=lambda partition: partition == 0)
    a = _envelope("a")
    handoff.put(0, 7, a)
    assert handoff.take(0, 7) is a
    assert handoff.take(0, 7) is None  # read again (a re-seek): decoded from its bytes
    assert (handoff.handed, handoff.missed, handoff.size) == (1, 1, 0)


def test_partitions_another_instance_decides_are_not_kept() -> None:
    handoff = Handoff(owned=lambda partition: partition == 0)
    handoff.put(1, 3, _envelope("b"))
    assert handoff.size == 0 and handoff.take(1, 3) is None


def test_entries_before_the_record_taken_are_dropped_with_it() -> None:
    # Offsets 4 and 5 were read before their acks reached the router (decoded from their bytes):
    # taking offset 6 drops them; offset 8 stays for its read.
    handoff = Handoff(owned=lambda _: True)
    for offset in (4, 5, 6, 8):
        handoff.put(2, offset, _envelope(f"t{offset}"))
    assert handoff.take(2, 6) is not None
    assert handoff.size == 1 and list(handoff.held[2]) == [8]
    assert handoff.take(2, 7) is None and handoff.size == 1  # 7 never came here; 8 stays


def test_past_the_limit_everything_is_dropped_and_a_released_partition_is_forgotten() -> None:
    handoff = Handoff(owned=lambda _: True, limit=3)
    for offset in range(3):
        handoff.put(0, offset, _envelope(f"t{offset}"))
    handoff.put(1, 0, _envelope("x"))  # the fourth: the three before are dropped
    assert handoff.size == 1 and handoff.take(0, 0) is None
    handoff.drop(1)
    assert handoff.size == 0 and handoff.take(1, 0) is None
