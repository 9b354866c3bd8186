"""The decider's traces: each task's trace context, forgotten when the task ends (issue 25:
`Decider.contexts` kept one per task ever submitted), and each pool's quota span.

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

`TaskTraces` owns both maps for the decider: the inbox remembers a submission's context and a
quota's span, the outgoing messages read them, the transaction forgets what a batch ended, a claim
restores what a snapshot carried and a release forgets its tasks'.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace

from gfs.services.preemption.controller.pool import PoolController
from gfs.services.preemption.journal.entries import Entry, SubmitEntry

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


class TaskTraces:
    """task -> its trace context (`contexts`, a `TraceContexts`), and pool -> the span of the quota
    in force (`quota_spans`: the quota service's `quota.persist`, carried by the SpotQuota record;
    a spot bind links to it, so a task's trace shows the quota that admitted it. Memory only: after
    a rebuild the link returns with the pool's next quota)."""

    __slots__ = ("contexts", "quota_spans")

    def __init__(self, cap: int = DEFAULT_CAP) -> None:
        self.contexts = TraceContexts(cap)
        self.quota_spans: dict[str, trace.SpanContext] = {}

    def remember(self, entry: Entry, ctx: otel_context.Context | None = None) -> tuple[str, ...]:
        """Remember a submission's trace context; the task id remembered (none for other entries)."""
        if not isinstance(entry, SubmitEntry):
            return ()
        tid = entry.task.task_id
        carrier = entry.trace
        if ctx is not None:  # live: the record's own context (the carrier was injected from it)
            self.contexts[tid] = ctx
        elif carrier:  # replay: only the journaled carrier
            self.contexts[tid] = propagate.extract(carrier)
        else:
            return ()
        return (tid,)

    def note_quota(self, pool: str, ctx: otel_context.Context) -> None:
        """A SpotQuota of `pool` arrived in `ctx`: its span is the one a spot bind links to."""
        quota_span = trace.get_current_span(ctx).get_span_context()
        if quota_span.is_valid:
            self.quota_spans[pool] = quota_span

    def parent(self, task_id: str, ctx: otel_context.Context | None) -> otel_context.Context | None:
        """The context a message about `task_id` continues: the task's own, else `ctx`."""
        return self.contexts.get(task_id, ctx) if task_id else ctx

    def restore(self, carriers: Mapping[str, dict[str, str]]) -> None:
        """The contexts a snapshot carried (task -> its injected carrier)."""
        for tid, carrier in carriers.items():
            self.contexts[tid] = propagate.extract(carrier)

    def carriers(self, controllers: Iterable[PoolController]) -> dict[str, dict[str, str]]:
        """The contexts of the tasks `controllers` hold, injected (what a snapshot carries)."""
        out: dict[str, dict[str, str]] = {}
        for controller in controllers:
            for tid in controller.tasks:
                ctx = self.contexts.get(tid)
                if ctx is not None:
                    carrier: dict[str, str] = {}
                    propagate.inject(carrier, context=ctx)
                    out[tid] = carrier
        return out

    def forget_ended(self, task_ids: Iterable[str], controllers: Iterable[PoolController]) -> int:
        """Forget the contexts of `task_ids` that no pool of `controllers` holds; how many."""
        return forget_ended(self.contexts, task_ids, controllers)
