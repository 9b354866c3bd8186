"""The node agent's collaborators one at a time (services/node_agent/agent.py's module doc), each
built with only what it is given: a journal written by hand, the recording sink, a fixed clock. No
worker process is started here; a "gone" worker is a pid whose recorded start time does not match
(the agent's own test for a re-adopted worker that ended)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace

from gfs.schemas.clock import CLOCK_KEY, ClockAck, ClockPhase, ClockTick
from gfs.schemas.commands import EvictAck, EvictOutcome, WarnCommand
from gfs.schemas.telemetry import GpuAllocation, NodeTelemetry, RunningWorker
from gfs.schemas.topics import CLOCK_ACK_TOPIC, EVICT_ACK_TOPIC, TELEMETRY_TOPIC, WORKER_ACK_TOPIC
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.node_agent import procs
from gfs.services.node_agent.agent_metrics import AgentMetrics
from gfs.services.node_agent.clock_ticks import ClockTicks
from gfs.services.node_agent.eviction import Evictor
from gfs.services.node_agent.gpu import FakeGpuBackend
from gfs.services.node_agent.journal import CommandEntry, Journal, WorkerEntry
from gfs.services.node_agent.publisher import PRODUCER, AckPublisher
from gfs.services.node_agent.reclaim_warning import ReclaimWarner
from gfs.services.node_agent.recovery import recover
from gfs.services.node_agent.sim_clock import SimClock
from gfs.services.node_agent.telemetry import Telemetry
from gfs.services.node_agent.watcher import WorkerWatcher
from gfs.services.node_agent.workers import (
    NOT_STARTED_EXIT_CODE,
    UNKNOWN_EXIT_CODE,
    WorkerSupervisor,
)
from gfs.services.platform.metrics import configure_metrics
from gfs.services.platform.signing import SignatureCheck, check_signature, sign
from tests.unit.node_agent.conftest import KEY, NODE, RecordingSink, bind, evict

NOW = datetime(2030, 1, 1, tzinfo=UTC)
TRACER = trace.get_tracer("test")


@pytest.fixture(autouse=True)
def _no_stray_signals(monkeypatch: pytest.MonkeyPatch) -> None:
    """This module's workers are this test process or nobody: no signal may actually be sent."""

    def refuse(pid: int, expected_start_ticks: int, sig: object) -> procs.SignalResult:
        raise AssertionError(f"signal {sig} to pid {pid}")

    monkeypatch.setattr(procs, "signal_group", refuse)


def fixed() -> datetime:
    return NOW


def worker(task_id: str, **changes: Any) -> WorkerEntry:
    fields: dict[str, Any] = {
        "command_id": uuid.uuid4(), "task_id": task_id, "worker_index": 0, "task_class": "spot",
        "gpu_indices": (0,), "log_path": "/dev/null",
    }  # fmt: skip
    return WorkerEntry(**(fields | changes))


def gone(task_id: str, **changes: Any) -> WorkerEntry:
    """A worker that ran (started and acknowledged) and is not running any more, not our child."""
    ticks = procs.start_ticks(os.getpid())
    assert ticks is not None
    return worker(
        task_id, pid=os.getpid(), start_ticks=ticks + 1, started_at=NOW, started_acked=True, **changes
    )


def journal_of(tmp_path: Path, *workers: WorkerEntry, commands: tuple[CommandEntry, ...] = ()) -> Journal:
    journal = Journal.open(tmp_path / "journal.json", node=NODE)
    journal.state.workers = {w.key: w for w in workers}
    journal.state.commands = {str(c.command_id): c for c in commands}
    return journal


def evict_entry(**changes: Any) -> CommandEntry:
    """An eviction of a task that was not running here (no targets)."""
    fields: dict[str, Any] = {
        "command_id": uuid.uuid4(), "kind": "evict", "issued_at": NOW, "received_at": NOW,
        "task_ids": ("job-none",), "grace_seconds": 1.0,
    }  # fmt: skip
    return CommandEntry(**(fields | changes))


def not_running_ack(entry: CommandEntry) -> EvictAck:
    return EvictAck(
        command_id=entry.command_id, node=NODE, task_ids=entry.task_ids, outcome=EvictOutcome.NOT_RUNNING,
        acked_at=NOW,
    )  # fmt: skip


class FailingSink(RecordingSink):
    async def send(self, topic_name: str, envelope: Any) -> object:
        raise ConnectionError("broker down")


def publisher_of(sink: RecordingSink, key: bytes = KEY) -> AckPublisher:
    return AckPublisher(node=NODE, sink=sink, key=key, clock=fixed, tracer=TRACER)


def supervisor_of(journal: Journal, sim_clock: SimClock | None = None, gpus: int = 4) -> WorkerSupervisor:
    return WorkerSupervisor(
        node=NODE, gpu_count=gpus, journal=journal, clock=fixed, worker_env={}, sim_clock=sim_clock
    )


def evictor_of(journal: Journal, sink: RecordingSink) -> Evictor:
    return Evictor(
        node=NODE, journal=journal, supervisor=supervisor_of(journal), publisher=publisher_of(sink),
        metrics=AgentMetrics.create(configure_metrics("test").meter("test")), tracer=TRACER, clock=fixed,
        kill_wait_s=1.0,
    )  # fmt: skip


def watcher_of(
    journal: Journal, sink: RecordingSink, evicting: Callable[[uuid.UUID], bool] = lambda _: False
) -> WorkerWatcher:
    return WorkerWatcher(
        supervisor=supervisor_of(journal), journal=journal, publisher=publisher_of(sink), evicting=evicting,
        clock=fixed, retention=timedelta(minutes=5), watch_s=0.01,
    )  # fmt: skip


# The publisher ------------------------------------------------------------------------------------


async def test_the_publisher_signs_with_its_key_and_stamps_with_its_clock() -> None:
    sink = RecordingSink()
    other_key = bytes(range(50, 82))
    started = worker("job-p", pid=41, started_at=NOW, attempt=2)
    publisher = publisher_of(sink, key=other_key)
    await publisher.publish(WORKER_ACK_TOPIC, publisher.started(started), None)
    ((topic, envelope),) = sink.sent
    assert (topic, envelope.producer, envelope.occurred_at) == (WORKER_ACK_TOPIC, PRODUCER, NOW)
    assert envelope.payload == sign(
        WorkerStarted(
            command_id=started.command_id, node=NODE, task_id="job-p", worker_index=0, pid=41,
            started_at=NOW, attempt=2,
        ),
        key=other_key,
    )  # fmt: skip
    assert check_signature(envelope.payload, key=other_key) is SignatureCheck.VALID


# The supervisor -----------------------------------------------------------------------------------


def test_a_worker_on_a_gpu_the_node_lacks_is_not_started(tmp_path: Path) -> None:
    journal = journal_of(tmp_path)
    missing = worker("job-g", gpu_indices=(1, 2))
    supervisor_of(journal, gpus=2).start(bind("job-g", gpus=(1, 2)), missing)
    assert (missing.pid, missing.exit_code, missing.exited_at) == (None, NOT_STARTED_EXIT_CODE, NOW)
    assert missing.exit_detail == "GPU indices [2] do not exist on this node (2 GPUs)"


async def test_the_supervisor_reaps_a_readopted_worker_that_ended(tmp_path: Path) -> None:
    ended, done = gone("job-r"), worker("job-s", exited_at=NOW, exit_code=0)
    journal = journal_of(tmp_path, ended, done)
    supervisor = supervisor_of(journal)
    assert supervisor.has_ended(ended) and supervisor.has_ended(done)
    waiting = asyncio.create_task(supervisor.wait_exited([ended], timeout_s=5.0))
    await asyncio.sleep(0)
    assert not waiting.done()
    assert supervisor.reap() == [ended]
    assert (ended.exit_code, ended.exited_at) == (UNKNOWN_EXIT_CODE, NOW)
    assert journal.saves == 1  # on disk before anyone is told
    await asyncio.wait_for(waiting, timeout=1.0)  # the exit event, set by the reap
    assert supervisor.reap() == []


# The watcher --------------------------------------------------------------------------------------


async def test_an_eviction_ack_in_flight_is_left_to_the_evictor(tmp_path: Path) -> None:
    entry = evict_entry(state="done")
    entry.ack = not_running_ack(entry)
    journal, sink = journal_of(tmp_path, commands=(entry,)), RecordingSink()
    in_flight = {entry.command_id}
    watcher = watcher_of(journal, sink, evicting=lambda command_id: command_id in in_flight)
    await watcher.publish_pending()
    assert sink.sent == [] and not entry.ack_published
    in_flight.clear()  # the evictor's publish failed and its task ended: the watcher retries
    await watcher.publish_pending()
    assert [(topic, env.payload.command_id) for topic, env in sink.sent] == [
        (EVICT_ACK_TOPIC, entry.command_id)
    ]
    assert entry.ack_published and journal.dirty


async def test_an_exit_waits_for_its_start_and_is_retried_until_published(tmp_path: Path) -> None:
    unannounced = worker("job-u", pid=7, started_at=NOW, exited_at=NOW, exit_code=0)  # no WorkerStarted yet
    ended = worker("job-e", pid=8, started_at=NOW, started_acked=True, exited_at=NOW, exit_code=3)
    journal = journal_of(tmp_path, unannounced, ended)
    await watcher_of(journal, FailingSink()).publish_pending()
    assert not ended.exit_acked  # not published: tried again on the next poll
    sink = RecordingSink()
    await watcher_of(journal, sink).poll_workers()
    assert [(e.task_id, e.exit_code) for e in sink.payloads(WorkerExited)] == [("job-e", 3)]
    assert ended.exit_acked and not unannounced.exit_acked


# The evictor --------------------------------------------------------------------------------------


async def test_an_eviction_of_a_task_not_here_is_in_flight_until_its_ack(tmp_path: Path) -> None:
    journal, sink = journal_of(tmp_path), RecordingSink()
    evictor = evictor_of(journal, sink)
    command = evict("job-away", issued_at=NOW)
    await evictor.evict(command, [], received_at=NOW)
    assert evictor.is_in_flight(command.command_id) and journal.state.evicted_unstarted == {
        "job-away": (command.command_id, NOW)
    }
    await asyncio.gather(*evictor.in_flight.values())
    assert not evictor.in_flight
    (ack,) = sink.payloads(EvictAck)
    assert (ack.command_id, ack.outcome, ack.acked_at) == (command.command_id, EvictOutcome.NOT_RUNNING, NOW)
    entry = journal.command(command.command_id)
    unsigned = ack.model_copy(update={"signature": ""})  # the journal keeps the ack, the wire its signed copy
    assert entry is not None and (entry.state, entry.ack, entry.ack_published) == ("done", unsigned, True)


# Reclaim warnings ---------------------------------------------------------------------------------


async def test_a_warning_for_a_run_not_here_is_journaled_and_signals_nothing(tmp_path: Path) -> None:
    other_attempt = worker("job-w", pid=os.getpid(), start_ticks=procs.start_ticks(os.getpid()), attempt=3)
    journal = journal_of(tmp_path, other_attempt)
    command = WarnCommand(
        command_id=uuid.uuid4(),
        node=NODE,
        task_id="job-w",
        warned_attempt=2,
        lead_seconds=60.0,
        issued_at=NOW,
    )
    await ReclaimWarner(journal=journal, clock=fixed).warn(command, [], received_at=NOW)
    entry = journal.command(command.command_id)
    assert entry is not None and (entry.kind, entry.state, entry.targets, entry.failures) == (
        "warn",
        "done",
        [],
        [],
    )
    assert other_attempt.warnings == 0 and journal.dirty


# Telemetry ----------------------------------------------------------------------------------------


async def test_telemetry_reports_the_journaled_shares_on_the_wall_clock(tmp_path: Path) -> None:
    half: dict[str, Any] = {"gpu_indices": (1,), "gpu_fraction": 0.5}
    journal = journal_of(
        tmp_path,
        worker("job-a", pid=11, attempt=1, **half),
        worker("job-a", pid=12, worker_index=1, attempt=1, **half),
        worker("job-b", pid=13, gpu_indices=(1,)),  # would over-allocate GPU 1: left out
        worker("job-c", exited_at=NOW, exit_code=0),  # ended: holds nothing
    )
    sink, wall = RecordingSink(), NOW + timedelta(hours=1)
    telemetry = Telemetry(
        node=NODE, gpu_model="TEST-GPU", backend=FakeGpuBackend("TEST-GPU", 2), journal=journal,
        wall_clock=lambda: wall, sink=sink, key=KEY,
    )  # fmt: skip
    sample = telemetry.sample()
    assert [g.allocations for g in sample.gpus] == [(), (GpuAllocation(task_id="job-a", fraction=1.0),)]
    assert sample.running == (
        RunningWorker(task_id="job-a", attempt=1, worker_index=0),
        RunningWorker(task_id="job-a", attempt=1, worker_index=1),
        RunningWorker(task_id="job-b", attempt=None, worker_index=0),
    )
    assert sample.sampled_at == wall
    await telemetry.publish()
    ((topic, envelope),) = sink.sent
    assert isinstance(envelope.payload, NodeTelemetry) and (topic, envelope.occurred_at) == (
        TELEMETRY_TOPIC,
        wall,
    )
    assert check_signature(envelope.payload, key=KEY) is SignatureCheck.VALID


# Clock ticks --------------------------------------------------------------------------------------


def ticks_of(journal: Journal, sink: RecordingSink, sim_clock: SimClock | None) -> ClockTicks:
    supervisor = supervisor_of(journal, sim_clock)
    watcher = WorkerWatcher(
        supervisor=supervisor, journal=journal, publisher=publisher_of(sink), evicting=lambda _: False,
        clock=fixed, retention=timedelta(minutes=5), watch_s=0.01,
    )  # fmt: skip
    return ClockTicks(
        node=NODE, journal=journal, sim_clock=sim_clock, supervisor=supervisor, watcher=watcher,
        publisher=publisher_of(sink), tracer=TRACER, clock_wait_s=1.0,
    )  # fmt: skip


def advance(sequence: int, at: datetime) -> ClockTick:
    return ClockTick(clock=CLOCK_KEY, at=at, sequence=sequence, phase=ClockPhase.ADVANCE)


async def test_ticks_mean_nothing_without_a_sim_clock(tmp_path: Path) -> None:
    sink = RecordingSink()
    assert await ticks_of(journal_of(tmp_path), sink, None).on_tick(advance(1, NOW)) is None
    assert sink.sent == []


async def test_an_advance_reports_a_worker_that_ended_before_its_clock_ack(tmp_path: Path) -> None:
    ended = gone("job-t")
    journal, sink = journal_of(tmp_path, ended), RecordingSink()
    clock = SimClock(tmp_path, wall=fixed)
    ticks = ticks_of(journal, sink, clock)
    ack = await ticks.on_tick(advance(5, NOW + timedelta(minutes=1)))
    assert ack == ClockAck(
        clock=CLOCK_KEY, component=f"node-agent/{NODE}", sequence=5, at=NOW + timedelta(minutes=1),
        exited=("job-t/0",), next_exit_at=None,
    )  # fmt: skip
    assert [topic for topic, _ in sink.sent] == [WORKER_ACK_TOPIC, CLOCK_ACK_TOPIC]
    assert await ticks.on_tick(advance(5, NOW + timedelta(minutes=2))) is None  # a repeat


# Recovery -----------------------------------------------------------------------------------------


async def test_recovery_reports_the_unstarted_and_resumes_the_accepted(tmp_path: Path) -> None:
    unforked = worker("job-lost")  # journaled as starting, never forked
    accepted = evict_entry()
    journal, sink = journal_of(tmp_path, unforked, commands=(accepted,)), RecordingSink()
    evictor = evictor_of(journal, sink)
    await recover(
        node=NODE, journal=journal, clock=fixed, publisher=publisher_of(sink), evictor=evictor,
        watcher=watcher_of(journal, sink, evictor.is_in_flight),
    )  # fmt: skip
    assert (unforked.exit_code, unforked.exit_detail) == (
        NOT_STARTED_EXIT_CODE,
        "the agent stopped while starting it",
    )
    assert [(e.task_id, e.exit_code) for e in sink.payloads(WorkerExited)] == [
        ("job-lost", NOT_STARTED_EXIT_CODE)
    ]
    await asyncio.gather(*evictor.in_flight.values())  # resumed: its grace ends, its ack follows
    assert [a.command_id for a in sink.payloads(EvictAck)] == [accepted.command_id]
