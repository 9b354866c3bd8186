"""Records the router validated, handed to this instance's decider in memory: one decode per record.

The router decodes and validates every input (the platform's consume loop) and forwards its bytes
to the inbox, keyed by pool. When the inbox partition it lands on is decided in this same process
(one instance, or the pools this instance owns), the decider would decode and validate the same
bytes a second time. Instead the router leaves the validated envelope here under the record's
inbox coordinates (partition, offset: the broker's ack says where it landed, and Kafka never
assigns an offset twice), and the decider takes it when it reads that record (issue 23, item 2).

Measured (docs/decisions.md): building the payload again costs as much whatever the way (pydantic's
one-pass JSON validation 6-16 µs per hot record, unpickling 4-13 µs), so not building it is the
saving. A record decided by another instance, read before its ack reached the router, re-read
after a rebuild, or dropped here is decoded from its bytes as before: this is only a shortcut, and
the inbox bytes stay the contract (an instance of the previous release reads them unchanged).

Bounded: only partitions this instance's decider holds are kept, an entry older than the record
the decider takes is dropped with it (it was read before its ack arrived), and past `limit`
entries everything is dropped (the decider then decodes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gfs.schemas.envelope import Envelope

LIMIT = 10_000  # entries held at most (a few MB): the decider normally takes them within a batch


@dataclass(slots=True)
class Handoff:
    owned: Callable[[int], bool]  # inbox partition -> whether this instance's decider holds it
    limit: int = LIMIT
    held: dict[int, dict[int, Envelope[Any]]] = field(default_factory=dict)  # partition -> offset ->
    size: int = 0
    handed: int = 0  # records the decider took from here (not decoded again)
    missed: int = 0  # records the decider read that were not here (decoded from their bytes)

    def put(self, partition: int, offset: int, envelope: Envelope[Any]) -> None:
        """The router forwarded `envelope` (validated) and the broker acked it at `offset`."""
        if not self.owned(partition):
            return  # another instance decides it (or none yet): it decodes the bytes
        if self.size >= self.limit:
            self.held.clear()
            self.size = 0
        self.held.setdefault(partition, {})[offset] = envelope
        self.size += 1

    def take(self, partition: int, offset: int) -> Envelope[Any] | None:
        """The validated envelope of the inbox record at (partition, offset), if the router of this
        process forwarded it and it is still here; entries before it are dropped (never taken)."""
        held = self.held.get(partition)
        found = None if held is None else held.pop(offset, None)
        if held is not None:
            if found is not None:
                self.size -= 1
            # Acks of one partition arrive in offset order, so the oldest entries come first.
            while held:
                first = next(iter(held))
                if first > offset:
                    break
                del held[first]
                self.size -= 1
        if found is None:
            self.missed += 1
        else:
            self.handed += 1
        return found

    def drop(self, partition: int) -> None:
        """The decider gave `partition` up: what was left for it is never taken here."""
        self.size -= len(self.held.pop(partition, {}))
