"""The decider forgets an ended task's trace context (issue 25: `Decider.contexts` kept one per task
ever submitted), after the batch that ended it, whose decision still carries the task's trace id.

The decider's own commit path (`Transaction.commit`) runs for real; only its Postgres port
(`store.commit_batch`, the route marking) is replaced by recorders."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from gfs.schemas.tasks import TaskCancelled, TaskClass, TaskSubmitted
from gfs.services.platform.clock import ManualClock
from gfs.services.preemption.decider import Decider, NodeKeys
from gfs.services.preemption.decider.partition import PartitionState
from gfs.services.preemption.decider.traces import TraceContexts, forget_ended
from gfs.services.preemption.journal import store
from gfs.services.preemption.journal.entries import NodeSeenEntry
from gfs.services.preemption.journal.inputs import Entry, apply, entry_for
from gfs.services.preemption.router import expiry
from gfs.services.preemption.service import PreemptionSettings

T0 = 1_800_000_000.0
POOL = "A100"


class _Pool:
    """An asyncpg pool stand-in: `acquire()` yields nothing (every statement is faked)."""

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[None]:
        yield None


def _submit(tid: str, at: float) -> Entry:
    task = TaskSubmitted(task_id=tid, tenant="org-a", gpu_model=POOL, gpus_per_worker=1, workers=1,
                         task_class=TaskClass.HP, command=("gfs", "fake-task"))  # fmt: skip
    entry = entry_for(task, at)
    assert entry is not None
    return entry


def _cancel(tid: str, at: float) -> Entry:
    entry = entry_for(TaskCancelled(task_id=tid, tenant="org-a", reason="done"), at)
    assert entry is not None
    return entry


@pytest.fixture
def committed(monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[str, Any]]]:
    """The decisions each faked commit recorded (pool, decision)."""
    batches: list[list[tuple[str, Any]]] = []

    async def commit_batch(
        _c: Any, _claim: Any, _offset: Any, _rows: Any, decisions: Any, *_: Any, **__: Any
    ) -> None:
        batches.append(list(decisions))

    async def mark_ended(_c: Any, task_ids: list[str]) -> int:
        return len(task_ids)

    monkeypatch.setattr(store, "commit_batch", commit_batch)
    monkeypatch.setattr(expiry, "mark_ended", mark_ended)
    return batches


def _decider() -> Decider:
    settings = PreemptionSettings(
        preemption_snapshot_rows=0, preemption_snapshot_s=0, preemption_dry_run=True
    )  # fmt: skip
    return Decider(_Pool(), settings, ManualClock(T0), "unit", NodeKeys(b"unit-secret"))  # type: ignore[arg-type]


async def _batch(
    decider: Decider, state: PartitionState, entry: Entry, ctx: otel_context.Context | None
) -> None:
    decider.traces.remember(entry, ctx)
    out = apply(state.controller(POOL, decider.settings), entry)
    await decider.transaction.commit(state, [(POOL, entry, None)], [(POOL, out, ctx)], next_offset=None)


async def test_the_contexts_of_ended_tasks_are_forgotten_after_their_last_decision(
    committed: list[list[tuple[str, Any]]],
) -> None:
    decider = _decider()
    state = PartitionState(store.Claim(partition=0, epoch=1, next_offset=0))
    await _batch(decider, state, NodeSeenEntry(node="n0", gpus=2, at=T0), None)
    tracer = TracerProvider().get_tracer("unit")
    trace_ids: dict[str, str] = {}
    # 1,001 one-GPU tasks on a 2-GPU node (the first two are bound, the rest queue), then every
    # one but "keep" cancelled: the queued ones are withdrawn (ended).
    tids = [f"t{i}" for i in range(1000)] + ["keep"]
    for i, tid in enumerate(tids):
        with tracer.start_as_current_span(f"submit {tid}") as span:
            trace_ids[tid] = f"{span.get_span_context().trace_id:032x}"
            await _batch(decider, state, _submit(tid, T0 + 1 + i), otel_context.get_current())
    for i, tid in enumerate(tids[:-1]):
        await _batch(decider, state, _cancel(tid, T0 + 2000 + i), None)
    # Queued ones were withdrawn; the two running ones were evicted (their attempt's end unknown,
    # no ack yet): those two are still held by the pool and keep their contexts.
    ctl = state.controllers[POOL]
    held = {t for t in tids if t in ctl.tasks or t in ctl.ending}
    assert "keep" in held and len(held) <= 3
    assert set(decider.contexts) == held
    # The last decision of a forgotten task still names its trace.
    last = {d.task_id: d for batch in committed for _, d in batch if d.task_id}
    assert last["t500"].kind == "withdrawn"
    assert last["t500"].detail["trace_id"] == trace_ids["t500"]


def test_the_cap_drops_the_least_recently_set_first() -> None:
    contexts = TraceContexts(cap=3)
    ctx = trace.set_span_in_context(trace.INVALID_SPAN)
    for tid in ("a", "b", "c"):
        contexts[tid] = ctx
    contexts["a"] = ctx  # set again: newest
    contexts["d"] = ctx
    assert list(contexts) == ["c", "a", "d"]
    with pytest.raises(ValueError, match="positive"):
        TraceContexts(cap=0)


def test_only_tasks_no_pool_holds_are_forgotten() -> None:
    decider = _decider()
    state = PartitionState(store.Claim(partition=0, epoch=1, next_offset=0))
    ctl = state.controller(POOL, decider.settings)
    apply(ctl, ("node_seen", {"node": "n0", "gpus": 2}, T0))
    apply(ctl, _submit("held", T0))  # bound on n0: the pool holds it
    ctx = otel_context.get_current()
    contexts = {"held": ctx, "gone": ctx, "other": ctx}
    assert forget_ended(contexts, ["held", "gone", ""], [ctl]) == 1
    assert set(contexts) == {"held", "other"}  # "other" was not asked about
