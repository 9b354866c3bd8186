"""The decider's trace context per task, forgotten when the task ends (issue 25: `Decider.contexts`
kept one per task ever submitted).

A task's context makes every decision about it a span of the task's own trace (the submission's),
and gives its decision records their `trace_id`. It is needed while a decision about the task can
still come: while its pool holds the task (queued or running) or an evicted attempt whose end is not
known yet (`PoolController.ending`; the "finished" of that attempt is decided later). So:
- after each committed batch, the tasks the batch decided about that no owned pool holds any more
  are forgotten (`forget_ended`): the batch's own decisions, events and commands were already built
  with the context, so an ended task's trace still shows its last decision;
- a claim forgets the contexts of the tasks its replay saw end, and losing a partition forgets its
  tasks' contexts (their new owner has them);
- `TraceContexts` is also capped (`DEFAULT_CAP`, oldest first) as a safety net for whatever the rule
  misses (a duplicate submission of an ended id re-adds a context no end will forget): a live task
  whose context falls off the cap has its later decisions start a new trace, nothing else changes.
"""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry import context as otel_context

from services.preemption.controller.pool import PoolController

DEFAULT_CAP = 100_000  # several times the tasks a deployment holds queued and running at once


class TraceContexts(dict[str, otel_context.Context]):
    """task -> its trace context, at most `cap` entries (the least recently set go first)."""

    __slots__ = ("cap",)

    def __init__(self, cap: int = DEFAULT_CAP) -> None:
        super().__init__()
        if cap <= 0:
            raise ValueError("the trace context cap must be positive")
        self.cap = cap

    def __setitem__(self, task_id: str, ctx: otel_context.Context) -> None:
        self.pop(task_id, None)  # re-set: newest again
        super().__setitem__(task_id, ctx)
        while len(self) > self.cap:
            del self[next(iter(self))]


def holds(controllers: Iterable[PoolController], task_id: str) -> bool:
    """Whether a pool may still decide about `task_id` (queued, running, or an attempt ending)."""
    return any(task_id in c.tasks or task_id in c.ending for c in controllers)


def forget_ended(
    contexts: dict[str, otel_context.Context], task_ids: Iterable[str], controllers: Iterable[PoolController]
) -> int:
    """Forget the contexts of `task_ids` that no pool of `controllers` holds; how many."""
    pools = list(controllers)
    forgotten = 0
    for tid in set(task_ids):
        if tid and tid in contexts and not holds(pools, tid):
            del contexts[tid]
            forgotten += 1
    return forgotten
