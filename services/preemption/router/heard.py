"""How far the router has heard: the time before which every input was forwarded to the inbox.

The decider does not count a node's silence past it (liveness.py): a router that could not read
(broker away, partitions lagging or moving between instances) must not make nodes look dead.
Updated after every fetch of the router's consume loop, empty or not (`BatchMode.after_poll`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Heard:
    """`at`: every input sent before it has been forwarded (None: not known yet); per source
    partition in `by_partition`."""

    at: float | None = None
    by_partition: dict[tuple[str, int], float] = field(default_factory=dict)

    async def note(self, consumer: Any) -> None:
        """After a fetch: the oldest of the partitions' caught-up times (a lagging partition keeps
        the last one). No partitions (another instance routes them): now."""
        assigned = consumer.assignment()
        if not assigned:
            self.at = time.time()
            return
        times: list[float] = []
        for tp in assigned:
            key = (tp.topic, tp.partition)
            if consumer.last_poll_timestamp(tp) is not None:
                at = caught_up_at(consumer, tp, await consumer.position(tp))
                if at is not None:
                    self.by_partition[key] = max(at, self.by_partition.get(key, at))
            if key not in self.by_partition:
                self.at = None
                return
            times.append(self.by_partition[key])
        self.at = min(times)


def caught_up_at(consumer: Any, tp: Any, position: int) -> float | None:
    """When `tp` was last seen read to its end (the time of the fetch that showed it), or None if
    it lags or was never fetched. A stalled fetch (broker away, partition paused) keeps the old
    time, so the time a consumer could not hear stays out of every node's silence."""
    end = consumer.last_stable_offset(tp)
    if end is None or end < 0:
        end = consumer.highwater(tp)
    polled = consumer.last_poll_timestamp(tp)
    if end is None or polled is None or position < end:
        return None
    return float(polled) / 1000
