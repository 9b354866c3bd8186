"""The pass trigger (the simulator's "dirty" pool): a pass runs only when something it could act
on changed since the last one: a task arrived, finished or was cancelled, the quota or the nodes
changed, a lease was released, or the shell invalidated the memos. Evictions and starts decided by
a pass do not set it: that pass already saw them."""

from __future__ import annotations


class PassTrigger:
    def __init__(self, pending: bool = True) -> None:
        self.pending = pending  # True: a new pool's first trigger runs a pass (the live service)

    def set(self, changed: bool = True) -> None:
        self.pending |= changed

    def take(self) -> bool:
        """Whether a pass is due; clears it (the pass about to run consumes it)."""
        due, self.pending = self.pending, False
        return due
