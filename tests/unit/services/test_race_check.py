"""The race run's check (services/livebench/races/check.py) on small hand-made histories: every
count below is worked out by hand from the records and journal entries built in each test."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome
from gfs.schemas.tasks import (
    EvictionReason,
    GuaranteeOutcome,
    GuaranteePeriodClosed,
    Placement,
    TaskAccepted,
    TaskClass,
    TaskEvicted,
    TaskFinished,
    TaskRejected,
)
from gfs.schemas.workers import WorkerExited
from gfs.services.livebench.races.check import Seen, check
from gfs.services.node_agent.journal import CommandEntry, WorkerEntry

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
END = T0 + timedelta(seconds=100)
NODE = "n0"


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def seen(payload: Any, *, occurred: float = 0.0, delay_ms: float = 0.0, topic: str = "t") -> Seen:
    return Seen(topic, int(at(occurred).timestamp() * 1000 + delay_ms), at(occurred), payload)


def worker(task: str, attempt: int, gpus: tuple[int, ...], *, start: float | None, stop: float | None,
           code: int | None = 0, sigterm: float | None = None, fraction: float = 1.0,
           command: uuid.UUID | None = None, evicting: uuid.UUID | None = None) -> WorkerEntry:  # fmt: skip
    return WorkerEntry(
        command_id=command or uuid.uuid4(), task_id=task, worker_index=0, task_class="SPOT", attempt=attempt,
        gpu_indices=gpus, gpu_fraction=fraction, log_path="/dev/null",
        pid=None if start is None else 1000, start_ticks=None if start is None else 1,
        started_at=None if start is None else at(start), exited_at=None if stop is None else at(stop),
        exit_code=code, sigterm_at=None if sigterm is None else at(sigterm), evicting_command=evicting,
    )  # fmt: skip


def bind(task: str, attempt: int, gpus: tuple[int, ...], issued: float) -> BindCommand:
    return BindCommand(command_id=uuid.uuid4(), node=NODE, task_id=task, task_class=TaskClass.SPOT,
                       placements=(Placement(worker_index=0, node=NODE, gpu_indices=gpus),), command=("x",),
                       issued_at=at(issued), attempt=attempt)  # fmt: skip


def evict(task: str, attempt: int, issued: float) -> EvictCommand:
    why = EvictionReason.PREEMPTED_BY_HP
    return EvictCommand(command_id=uuid.uuid4(), node=NODE, task_ids=(task,), reason=why, grace_seconds=2.0,
                        issued_at=at(issued), attempt=attempt)  # fmt: skip


def exited(b: BindCommand, when: float, code: int = 0) -> WorkerExited:
    return WorkerExited(command_id=b.command_id, node=NODE, task_id=b.task_id, worker_index=0, exit_code=code,
                        exited_at=at(when), attempt=b.attempt)  # fmt: skip


def evicted(e: EvictCommand, when: float) -> TaskEvicted:
    return TaskEvicted(task_id=e.task_ids[0], node=NODE, command_id=e.command_id, reason=e.reason,
                       evicted_at=at(when), lost_gpu_seconds=0.0)  # fmt: skip


def test_workers_alive_together_on_one_gpu_are_a_double_bind_on_the_node() -> None:
    workers = [
        worker("a", 1, (0,), start=10, stop=20),
        worker("b", 1, (0,), start=20, stop=30),  # starts as a ends: not together
        worker("c", 1, (0, 1), start=25, stop=26),  # GPU 0 while b runs: one double bind
        worker("d", 1, (2,), start=10, stop=None),  # still running at the end (100 s)
        worker("e", 1, (2,), start=50, stop=60),  # GPU 2 while d runs: another
        worker("f", 1, (3,), start=10, stop=20, fraction=0.5),
        worker("g", 1, (3,), start=12, stop=20, fraction=0.5),  # two halves: fine
        worker("h", 1, (3,), start=15, stop=16, fraction=0.25),  # 1.25 GPUs: one more
        worker("i", 1, (1,), start=None, stop=5, code=127),  # never started: holds nothing
    ]
    report = check([], {NODE: workers}, {}, end=END)
    assert len(report.double_bound_on_node) == 3
    assert [x.split(": ")[0] for x in report.double_bound_on_node] == ["n0 GPU 0", "n0 GPU 2", "n0 GPU 3"]
    assert report.double_bound_on_node[0].startswith("n0 GPU 0: c#1/w0")
    assert report.workers_run == 8
    assert not report.ok


def test_a_bind_issued_before_the_previous_holder_exited_is_a_double_bind_in_the_commands() -> None:
    a = bind("a", 1, (0,), issued=10)
    a_again = bind("a", 1, (0,), issued=15)  # re-issued bind of the same attempt: the same hold
    b = bind("b", 1, (0,), issued=19)  # a exits at 20: one double bind
    c = bind("c", 1, (0,), issued=30)  # after b's exit at 25: fine
    d = bind("d", 1, (1,), issued=10)  # never reports an exit: holds GPU 1 until the end
    e = bind("e", 2, (1,), issued=90)  # so this is another
    records = [seen(x) for x in (a, a_again, b, c, d, e)]
    records += [seen(exited(a, 20)), seen(exited(b, 25)), seen(exited(c, 40))]
    report = check(records, {}, {}, end=END)
    assert report.binds == 6 and report.binds_reissued == 1
    assert report.double_bound_in_commands == ["n0 GPU 0: b#1/w0 & a#1/w0", "n0 GPU 1: e#2/w0 & d#1/w0"]


def test_evictions_are_judged_by_what_the_agent_did() -> None:
    e1, e2, e3, e4 = evict("t1", 1, 10), evict("t2", 1, 10), evict("t3", 1, 10), evict("t4", 2, 10)
    b1, b2, b3 = bind("t1", 1, (0,), 5), bind("t2", 1, (1,), 5), bind("t3", 1, (2,), 9.9)
    workers = [
        worker("t1", 1, (0,), start=5, stop=9.5, command=b1.command_id),  # ended on its own: false
        worker("t2", 1, (1,), start=5, stop=10.2, code=-15, sigterm=10.1, command=b2.command_id),  # genuine
        # The agent read the eviction first and never started it: genuine.
        worker("t3", 1, (2,), start=None, stop=10.1, code=127, command=b3.command_id, evicting=e3.command_id),
    ]
    records = [seen(x) for x in (b1, b2, b3, e1, e2, e3, e4)]
    records += [seen(evicted(e, 11)) for e in (e1, e2, e3, e4)]
    records.append(seen(evicted(e2, 11)))  # t2 reported twice
    records += [
        seen(GuaranteePeriodClosed(task_id=t, pool="P", period_start=at(1), period_end=at(11),
                                   outcome=GuaranteeOutcome.FAILED))
        for t in ("t1", "t2")
    ]  # fmt: skip
    report = check(records, {NODE: workers}, {}, end=END)
    assert report.task_evicted == 5 and report.evictions == 4
    assert [x.split(" ")[0] for x in report.false_evictions] == ["t1#1", "t4#2"]
    assert "exited on its own (codes 0)" in report.false_evictions[0]
    assert "no bind of this attempt" in report.false_evictions[1]
    assert [x.split(" ")[0] for x in report.evicted_twice] == ["t2#1"]
    assert report.genuine_evictions == 2  # t2 (once), t3
    assert report.evicted_before_start == 1 and report.evict_read_before_bind == 1
    # t1's period closed at 11, when no eviction command was issued (they were at 10).
    assert report.false_failed_periods == [
        "t1: 1 FAILED periods, 0 evicted attempts (1 closed with no eviction command)"
    ]
    assert not report.ok


def test_a_gang_evicted_on_two_nodes_is_one_eviction_with_one_failed_period() -> None:
    b0, b1 = bind("g", 1, (0,), 5), bind("g", 1, (0,), 5)
    b1 = b1.model_copy(
        update={"node": "n1", "placements": (Placement(worker_index=1, node="n1", gpu_indices=(0,)),)}
    )
    e0 = evict("g", 1, 10)
    e1 = e0.model_copy(update={"command_id": uuid.uuid4(), "node": "n1"})
    w0 = worker("g", 1, (0,), start=5, stop=10.2, code=-15, sigterm=10.1, command=b0.command_id)
    w1 = worker("g", 1, (0,), start=5, stop=10.3, code=0, sigterm=10.1, command=b1.command_id)  # trapped TERM
    w1 = w1.model_copy(update={"worker_index": 1})
    ev1 = evicted(e1, 11).model_copy(update={"node": "n1"})
    closed = GuaranteePeriodClosed(task_id="g", pool="P", period_start=at(5), period_end=at(10),
                                   outcome=GuaranteeOutcome.FAILED)  # fmt: skip
    # Its next attempt was placed at 10.5 but held (attempt 1 still ending), then preempted at 10.8
    # before its bind went out: no command, yet a FAILED period.
    held = GuaranteePeriodClosed(task_id="g", pool="P", period_start=at(10.5), period_end=at(10.8),
                                 outcome=GuaranteeOutcome.FAILED)  # fmt: skip
    records = [seen(x) for x in (b0, b1, e0, e1, evicted(e0, 11), ev1, closed)]
    report = check(records, {NODE: [w0], "n1": [w1]}, {}, end=END)
    assert report.task_evicted == 2 and report.genuine_evictions == 2  # one per node's command
    assert report.evicted_twice == [] and report.false_evictions == [] and report.false_failed_periods == []
    # The worker on n1 had ended on its own before its eviction arrived (NOT_RUNNING there): the
    # attempt was still evicted (its other worker was stopped), so neither TaskEvicted is false.
    w1_own = w1.model_copy(update={"sigterm_at": None, "evicting_command": None, "exited_at": at(9.9)})
    report = check(records, {NODE: [w0], "n1": [w1_own]}, {}, end=END)
    assert report.false_evictions == [] and report.gang_nodes_ended_on_their_own == 1
    report = check([*records, seen(held)], {NODE: [w0], "n1": [w1]}, {}, end=END)
    assert report.false_failed_periods == [
        "g: 2 FAILED periods, 1 evicted attempts (1 closed with no eviction command)"
    ]


def test_exits_racing_an_eviction_are_counted_by_when_they_happened() -> None:
    b5, b6, b7 = bind("t5", 1, (0,), 1), bind("t6", 1, (1,), 1), bind("t7", 1, (2,), 1)
    e5, e6, e7 = evict("t5", 1, 10), evict("t6", 1, 10), evict("t7", 1, 10)
    workers = [
        worker("t5", 1, (0,), start=1, stop=10.1, command=b5.command_id),  # after issue, before receipt
        worker("t6", 1, (1,), start=1, stop=9.5, command=b6.command_id),  # before the eviction was issued
        worker("t7", 1, (2,), start=1, stop=10.3, code=-15, sigterm=10.2, command=b7.command_id),  # stopped
    ]
    journal = [
        CommandEntry(command_id=e.command_id, kind="evict", issued_at=e.issued_at, received_at=at(10.2))
        for e in (e5, e6, e7)
    ]
    ack = EvictAck(command_id=e5.command_id, node=NODE, task_ids=("t5",), outcome=EvictOutcome.NOT_RUNNING,
                   acked_at=at(10.2), attempt=1)  # fmt: skip
    records = [seen(x) for x in (b5, b6, b7, e5, e6, e7)]
    records += [seen(ack, occurred=10.2, delay_ms=250.0)]
    report = check(records, {NODE: workers}, {NODE: journal}, end=END)
    assert report.exits_while_eviction_in_flight == 1
    assert report.exits_before_eviction_issued == 1
    assert report.evictions_raced_by_exit == 2
    assert report.not_running_acks == 1
    assert report.ack_delays_ms == [250.0]
    assert report.ok  # no TaskEvicted at all: nothing false


def test_tasks_accepted_but_neither_finished_nor_rejected_are_unfinished() -> None:
    records = [seen(TaskAccepted(task_id=t, pool="P", task_class=TaskClass.HP)) for t in ("a", "b", "c")]
    records.append(seen(TaskFinished(task_id="a", exit_code=0, finished_at=at(5))))
    records.append(seen(TaskFinished(task_id="a", exit_code=0, finished_at=at(6))))
    records.append(seen(TaskRejected(task_id="b", reason="UNKNOWN_GPU_MODEL", message="no such pool")))
    report = check(records, {}, {}, end=END)
    assert (report.accepted, report.finished, report.rejected) == (3, 1, 1)
    assert report.unfinished == ["c"]
    assert report.finished_twice == ["a"]


def test_two_runs_of_one_task_alive_together_are_counted_and_a_frozen_run_stopped_running() -> None:
    old = worker("t", 1, (0,), start=10, stop=40)  # attempt 1 still alive when attempt 2 starts
    new = worker("t", 2, (1,), start=30, stop=50)
    fenced = worker("u", 1, (2,), start=10, stop=40)  # frozen at 20, killed at 40 by the fence
    fenced.frozen_at, fenced.fenced = at(20), True
    after = worker("u", 2, (3,), start=25, stop=50)  # starts while u#1 is frozen: not two runs
    serial = worker("v", 1, (4,), start=10, stop=20)
    again = worker("v", 2, (5,), start=20, stop=30)  # starts as attempt 1 exits: not together
    report = check([], {NODE: [old, new, fenced, after, serial, again]}, {}, end=END)
    assert report.two_runs_at_once == ["t: #1/w0@n0 & #2/w0@n0"]
    assert not report.ok
    # One attempt's worker started twice (two commands), alive together: two runs too.
    twice = [worker("w", 1, (6,), start=10, stop=30), worker("w", 1, (7,), start=20, stop=30)]
    assert check([], {NODE: twice}, {}, end=END).two_runs_at_once == ["w: #1/w0@n0 & #1/w0@n0"]
