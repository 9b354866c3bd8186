"""The command ledger alone (services/preemption/controller/ledger.py): what was issued, and the
check that binds an ack to its command. No controller: the records are put in by hand, as the
binder, the endings and the reconciler put them in."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from gfs.schemas.commands import EvictAck, EvictOutcome
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.preemption.controller.ledger import CommandLedger
from gfs.services.preemption.controller.types import _Bound, _Eviction

BIND = uuid.UUID(int=1)
EVICT = uuid.UUID(int=2)
AT = datetime(2027, 1, 1, tzinfo=UTC)


def _ledger() -> CommandLedger:
    ledger = CommandLedger("A100")
    ledger.bind_issued(BIND, _Bound("B", "n1", 2, frozenset({0, 1})))
    ledger.eviction_issued(EVICT, _Eviction("n1", ("B",), 2))
    return ledger


def _evict_ack(**kw: object) -> EvictAck:
    fields: dict[str, object] = {"command_id": EVICT, "node": "n1", "task_ids": ("B",),
                                 "outcome": EvictOutcome.KILLED, "acked_at": AT, "attempt": 2}  # fmt: skip
    return EvictAck(**(fields | kw))  # type: ignore[arg-type]


def _exited(**kw: object) -> WorkerExited:
    fields: dict[str, object] = {"command_id": BIND, "node": "n1", "task_id": "B", "worker_index": 1,
                                 "exit_code": 0, "exited_at": AT, "attempt": 2}  # fmt: skip
    return WorkerExited(**(fields | kw))  # type: ignore[arg-type]


def _started(**kw: object) -> WorkerStarted:
    fields: dict[str, object] = {"command_id": BIND, "node": "n1", "task_id": "B", "worker_index": 0,
                                 "pid": 7, "started_at": AT}  # fmt: skip
    return WorkerStarted(**(fields | kw))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Case:
    name: str
    ack: EvictAck | WorkerStarted | WorkerExited
    refused_because: str | None  # a fragment of the reason; None: applied
    source_key: str | None = None


CASES = [
    Case("eviction ack as issued", _evict_ack(), None),
    Case("eviction ack without attempt (an older agent)", _evict_ack(attempt=None), None),
    Case("eviction ack under its node's key", _evict_ack(), None, source_key="n1"),
    Case("eviction ack under another key", _evict_ack(), "published under key 'n0'", source_key="n0"),
    Case("eviction never issued", _evict_ack(command_id=uuid.UUID(int=9)), "no eviction"),
    Case("eviction answered by another node", _evict_ack(node="n0"), "addressed to 'n1'"),
    Case("eviction ack naming other tasks", _evict_ack(task_ids=("A",)), "tasks ['A'] differ"),
    Case("eviction ack of another attempt", _evict_ack(attempt=3), "attempt 3 differs"),
    Case("a bind's id in an eviction ack", _evict_ack(command_id=BIND), "no eviction"),
    Case("exit as bound", _exited(), None),
    Case("start without attempt", _started(), None),
    Case("bind never issued", _exited(command_id=uuid.UUID(int=9)), "no bind"),
    Case("exit from another node", _exited(node="n0"), "addressed to 'n1'"),
    Case("exit of another task", _exited(task_id="A"), "task 'A' differs"),
    Case("exit of a worker the bind did not place", _exited(worker_index=2), "worker 2 is not one"),
    Case("start of another attempt", _started(attempt=1), "attempt 1 differs"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_an_ack_is_refused_unless_it_matches_the_command_it_answers(case: Case) -> None:
    why = _ledger().refusal(case.ack, case.source_key)
    if case.refused_because is None:
        assert why is None
    else:
        assert why is not None and case.refused_because in why


def test_a_reissued_eviction_answers_for_the_one_it_replaces() -> None:
    ledger = _ledger()
    again = uuid.UUID(int=3)
    ledger.eviction_issued(again, _Eviction("n1", ("B",), 2), replaces=EVICT)
    assert ledger.original(again) == EVICT and ledger.original(EVICT) == EVICT
    assert ledger.refusal(_evict_ack(command_id=again)) is None  # its own ack passes the check


def test_an_eviction_is_reported_once_and_is_then_no_longer_unanswered() -> None:
    ledger = _ledger()
    assert ledger.unanswered(EVICT) is not None
    assert ledger.report(EVICT) is True
    assert ledger.report(EVICT) is False  # a second ack: nothing new to report
    assert ledger.unanswered(EVICT) is None
    assert ledger.unanswered(uuid.UUID(int=9)) is None  # never issued
    # NODE_LOST and unknown-work evictions are issued reported (nobody waits for their ack).
    lost = uuid.UUID(int=4)
    ledger.eviction_issued(lost, _Eviction("n2", ("X",), 1, reported=True))
    assert ledger.unanswered(lost) is None and ledger.report(lost) is False


def test_a_tasks_commands_are_dropped_a_keep_window_after_it_left_the_pool_and_not_before() -> None:
    ledger = _ledger()
    gang = uuid.UUID(int=3)  # one eviction of two tasks: kept while either is in the pool
    again = uuid.UUID(int=4)  # a re-issue of EVICT: its alias goes with it
    ledger.eviction_issued(gang, _Eviction("n2", ("B", "C"), 1))
    ledger.eviction_issued(again, _Eviction("n1", ("B",), 2), replaces=EVICT)
    in_pool = {"B", "C"}
    keep = 24 * 3600.0
    every = keep / 24
    assert ledger.sweep(0.0, in_pool.__contains__, keep) == 0
    in_pool -= {"B"}  # B finished at about t = 0; C still runs
    assert ledger.sweep(every, in_pool.__contains__, keep) == 0  # B first found gone here
    assert ledger.sweep(keep, in_pool.__contains__, keep) == 0  # gone keep - every: not yet
    assert ledger.sweep(keep + every, in_pool.__contains__, keep) == 3  # B's bind and two evictions
    assert set(ledger.bound) == set() and set(ledger.evictions) == {gang} and ledger.aliases == {}
    assert "no eviction" in (ledger.refusal(_evict_ack()) or "")  # a later ack of B's: unmatched
    # C leaves: the gang's eviction goes a window later; a sweep waits keep / 24 after the last one.
    in_pool.clear()
    assert ledger.sweep(keep + every + 1.0, in_pool.__contains__, keep) == 0  # too soon to sweep
    assert ledger.sweep(keep + 2 * every, in_pool.__contains__, keep) == 0  # C first found gone
    assert ledger.sweep(2 * keep + 2 * every, in_pool.__contains__, keep) == 1
    assert not ledger.evictions and not ledger._gone


def test_a_task_back_in_the_pool_keeps_its_commands() -> None:
    ledger = _ledger()
    keep = 3600.0
    ledger.sweep(0.0, lambda _t: False, keep)  # B out (between a finish and a resubmission)
    ledger.sweep(keep / 2, lambda _t: True, keep)  # back: its clock starts again
    assert ledger.sweep(keep + 1.0, lambda _t: False, keep) == 0
    assert set(ledger.bound) == {BIND} and set(ledger.evictions) == {EVICT}
