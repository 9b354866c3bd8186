"""The forecast stream's pure steps: which task events move HP demand, and that its per-minute,
hourly-peak series is exactly the simulator's observed-demand series on the same events."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from uuid import uuid4

import pytest

from gfs.schemas.tasks import (
    EvictionReason,
    TaskAccepted,
    TaskCancelled,
    TaskClass,
    TaskEvicted,
    TaskFinished,
    TaskRejected,
    TaskStarted,
    TaskSubmitted,
)
from gfs.services.core.observed_demand import ObservedDemand
from gfs.services.forecast.pipeline import Delta, PoolDemand, TaskRecord, apply_task_event

T = datetime(2026, 1, 1, tzinfo=UTC)


def _submit(cls: TaskClass = TaskClass.HP, gpus: float = 2, workers: int = 3) -> TaskSubmitted:
    return TaskSubmitted(task_id="t", tenant="org", gpu_model="A100", gpus_per_worker=gpus, workers=workers,
                         task_class=cls, command="run")  # fmt: skip


def _run(events: list[object]) -> list[Delta]:
    record: TaskRecord | None = None
    deltas = []
    for i, event in enumerate(events):
        record, delta = apply_task_event(record, event, float(i))
        if delta is not None:
            deltas.append(delta)
    return deltas


ACCEPT = TaskAccepted(task_id="t", pool="A100", task_class=TaskClass.HP)
FINISH = TaskFinished(task_id="t", exit_code=0, finished_at=T)
DUPLICATE = TaskRejected(
    task_id="t", reason="DUPLICATE_TASK_ID", message="a task with this id was already submitted"
)


def _evicted(reason: EvictionReason) -> TaskEvicted:
    return TaskEvicted(
        task_id="t", node="n", command_id=uuid4(), reason=reason, evicted_at=T, lost_gpu_seconds=0.0
    )


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        ([_submit(), ACCEPT], [6.0]),  # 2 GPUs x 3 workers, counted from acceptance
        ([_submit(), ACCEPT, FINISH], [6.0, -6.0]),
        ([_submit(), TaskRejected(task_id="t", reason="UNKNOWN_GPU_MODEL", message="m")], []),
        ([_submit(), ACCEPT, TaskCancelled(task_id="t", tenant="org")], [6.0, -6.0]),
        ([_submit(), ACCEPT, _evicted(EvictionReason.CANCELLED)], [6.0, -6.0]),
        ([_submit(), ACCEPT, _evicted(EvictionReason.NODE_DRAIN)], [6.0]),  # requeued: still counted
        ([_submit(TaskClass.SPOT), TaskAccepted(task_id="t", pool="A100", task_class=TaskClass.SPOT)], []),
        ([ACCEPT], []),  # no submission seen: no size to count
        ([ACCEPT, _submit()], [6.0]),  # the lifecycle topic read first: counted when the size arrives
        ([ACCEPT, FINISH, _submit()], []),  # ended before its size was known: never counted
        ([_submit(), ACCEPT, ACCEPT, _submit()], [6.0]),  # redeliveries change nothing
        ([_submit(), ACCEPT, FINISH, FINISH], [6.0, -6.0]),
        # A second submission with the task's id is rejected as a duplicate under the same task id:
        # that rejection is the copy's, the original still runs and counts until it ends.
        ([_submit(), ACCEPT, DUPLICATE], [6.0]),
        ([_submit(), ACCEPT, DUPLICATE, FINISH], [6.0, -6.0]),
    ],
    ids=[
        "accepted",
        "finished",
        "rejected-never-counted",
        "cancelled",
        "evicted-cancelled",
        "evicted-requeued",
        "spot",
        "unknown-task",
        "accepted-before-submitted",
        "ended-before-submitted",
        "duplicates",
        "finished-twice",
        "duplicate-rejected-original-still-counts",
        "duplicate-rejected-then-original-finishes",
    ],
)
def test_which_events_move_hp_demand(events: list[object], expected: list[float]) -> None:
    assert [d.gpus for d in _run(events)] == expected


def test_started_task_still_counts() -> None:
    started = TaskStarted.model_construct(task_id="t", pool="A100", task_class=TaskClass.HP)
    assert [d.gpus for d in _run([_submit(), ACCEPT, started])] == [6.0]


def test_stream_series_equals_the_simulators_observed_series() -> None:
    # Random accepts and ends of HP tasks of 3 tenants over 6 hours, some at minute boundaries,
    # some at the same instant: the stream's completed hours equal ObservedDemand's rows.
    rng = random.Random(7)
    tenants = ["a", "b", "c"]
    times = sorted(rng.choice([rng.uniform(0, 6 * 3600), 60.0 * rng.randrange(360)]) for _ in range(400))
    live: dict[str, list[float]] = {t: [] for t in tenants}
    events: list[tuple[float, str, float]] = [(0.0, "a", 0.0)]
    for at in times:
        tenant = rng.choice(tenants)
        if live[tenant] and rng.random() < 0.45:
            events.append((at, tenant, -live[tenant].pop(rng.randrange(len(live[tenant])))))
        else:
            gpus = rng.choice([0.5, 1.0, 2.0, 8.0])
            live[tenant].append(gpus)
            events.append((at, tenant, gpus))
    sim = ObservedDemand([("P", t) for t in tenants], 6)
    stream = PoolDemand()
    closed = []
    for at, tenant, gpus in events:
        if gpus >= 0:
            sim.add(at, ("P", tenant), gpus)
        else:
            sim.remove(at, ("P", tenant), -gpus)
        closed += stream.apply(Delta("P", tenant, gpus, at))
    sim.advance(6 * 3600.0)
    closed += stream.advance(6 * 3600.0)
    assert [h.hour for h in closed] == [0, 1, 2, 3, 4, 5]
    for h in closed:
        assert [h.tenants.get(t, 0.0) for t in tenants] == sim.hourly[h.hour].tolist()
        assert h.pool == sim.pool_hourly[h.hour, 0]


def test_stream_series_equals_the_simulators_servable_series() -> None:
    # Issue 35: the preemption service publishes a pool's servable levels after each pass that
    # changed them; the stream (PoolDemand.set_levels) and the simulator (ObservedDemand.set_levels)
    # sample the same step function: random level sets of 3 tenants over 6 hours, some at minute
    # boundaries, some at one instant, tenants dropping out (back to 0).
    rng = random.Random(11)
    tenants = ["a", "b", "c"]
    times = sorted(rng.choice([rng.uniform(0, 6 * 3600), 60.0 * rng.randrange(360)]) for _ in range(300))
    sim = ObservedDemand([("P", t) for t in tenants], 6)
    stream = PoolDemand()
    closed = stream.set_levels({}, 0.0)
    sim.set_levels(0.0, "P", {})
    for at in times:
        levels = {t: rng.choice([0.5, 1.0, 4.0, 8.0, 24.0]) for t in tenants if rng.random() < 0.6}
        sim.set_levels(at, "P", levels)
        closed += stream.set_levels(levels, at)
    sim.advance(6 * 3600.0)
    closed += stream.advance(6 * 3600.0)
    assert [h.hour for h in closed] == [0, 1, 2, 3, 4, 5]
    for h in closed:
        assert [h.tenants.get(t, 0.0) for t in tenants] == sim.hourly[h.hour].tolist()
        assert h.pool == sim.pool_hourly[h.hour, 0]
    assert max(float(sim.pool_hourly[:, 0].max()), 0.0) > 0.0  # the levels were sampled at all


def test_state_round_trips_through_json() -> None:
    demand = PoolDemand()
    demand.apply(Delta("P", "a", 3.0, 10.0))
    demand.apply(Delta("P", "b", 1.5, 200.0))
    again = PoolDemand.from_json(demand.to_json())
    assert again.to_json() == demand.to_json()
    record = TaskRecord("org", 6.0, True, "A100", 12.0, True, False)
    assert TaskRecord.from_json(record.to_json()) == record
