"""The agent's core with real `fake-task` workers and a recording sink (no Kafka): bind, exit,
evict (checkpointed / killed / not running), repeats, rejections, restart and re-adoption."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gfs.schemas.commands import EvictAck, EvictOutcome
from gfs.schemas.telemetry import NodeTelemetry
from gfs.schemas.topics import decode, encode
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.node_agent import procs
from gfs.services.node_agent.agent import NOT_STARTED_EXIT_CODE, UNKNOWN_EXIT_CODE
from gfs.services.node_agent.security import Rejection
from gfs.services.platform.signing import SIGNED_TYPES, SignatureCheck, check_signature
from tests.unit.node_agent.conftest import KEY, NODE, AgentHarness, bind, evict, start_agent


def _log(harness: AgentHarness, task_id: str) -> str:
    worker = next(w for w in harness.agent.journal.state.workers.values() if w.task_id == task_id)
    return Path(worker.log_path).read_text()


async def _running(harness: AgentHarness, task_id: str) -> None:
    await harness.until(lambda: "started" in _log(harness, task_id))


async def test_bind_starts_the_worker_with_its_gpus_and_reports_its_exit(
    harness: AgentHarness, tmp_path: Path
) -> None:
    env_file = tmp_path / "env.json"
    command = bind("job-a", "--duration", "0.3", "--exit-code", "3", "--env-file", str(env_file), gpus=(1, 3))
    await harness.send(command)
    started = harness.sink.payloads(WorkerStarted)
    assert [(s.task_id, s.worker_index, s.command_id) for s in started] == [("job-a", 0, command.command_id)]
    await harness.until(lambda: bool(harness.sink.payloads(WorkerExited)))
    env = json.loads(env_file.read_text())
    assert env["CUDA_VISIBLE_DEVICES"] == "1,3"
    assert env["GFS_TASK_ID"] == "job-a" and env["GFS_WORKER_INDEX"] == "0"
    assert "GFS_CHECKPOINT_INTERVAL_S" not in env
    (exited,) = harness.sink.payloads(WorkerExited)
    assert (exited.exit_code, exited.evicted, exited.node) == (3, False, NODE)
    # WorkerStarted always precedes WorkerExited.
    kinds = [e.event_type for _, e in harness.sink.sent]
    assert kinds.index("WorkerStarted") < kinds.index("WorkerExited")


async def test_telemetry_reports_the_shares_the_workers_hold(harness: AgentHarness) -> None:
    await harness.send(bind("job-t", gpus=(0, 2)))
    sample = harness.agent.telemetry()
    assert isinstance(sample, NodeTelemetry) and len(sample.gpus) == 4
    held = {g.index: [(a.task_id, a.fraction) for a in g.allocations] for g in sample.gpus}
    assert held == {0: [("job-t", 1.0)], 1: [], 2: [("job-t", 1.0)], 3: []}


async def test_evict_sigterms_then_acks_checkpointed(harness: AgentHarness) -> None:
    await harness.send(bind("job-b", checkpoint_interval_s=30.0))
    await _running(harness, "job-b")
    command = evict("job-b", grace=5.0)
    await harness.send(command)
    entry = harness.agent.journal.command(command.command_id)
    assert entry is not None and entry.state == "accepted" and entry.sigterm_at is not None
    await harness.until(lambda: bool(harness.sink.payloads(EvictAck)))
    (ack,) = harness.sink.payloads(EvictAck)
    assert (ack.outcome, ack.task_ids, ack.command_id) == (
        EvictOutcome.CHECKPOINTED,
        ("job-b",),
        command.command_id,
    )
    assert "checkpointed" in _log(harness, "job-b")
    await harness.until(lambda: bool(harness.sink.payloads(WorkerExited)))
    (exited,) = harness.sink.payloads(WorkerExited)
    assert exited.evicted and exited.exit_code == 0


async def test_a_worker_ignoring_sigterm_is_killed_after_the_grace(harness: AgentHarness) -> None:
    await harness.send(bind("job-c", "--ignore-sigterm"))
    await _running(harness, "job-c")
    await harness.send(evict("job-c", grace=0.5))
    await harness.until(lambda: bool(harness.sink.payloads(EvictAck)))
    (ack,) = harness.sink.payloads(EvictAck)
    assert ack.outcome is EvictOutcome.KILLED
    assert "sigterm ignored" in _log(harness, "job-c")
    await harness.until(lambda: bool(harness.sink.payloads(WorkerExited)))
    assert harness.sink.payloads(WorkerExited)[0].exit_code == -9


async def test_evictions_run_concurrently(harness: AgentHarness) -> None:
    for task in ("job-x", "job-y"):
        await harness.send(bind(task, "--ignore-sigterm"))
        await _running(harness, task)
    t0 = datetime.now(UTC)
    await harness.send(evict("job-x", grace=1.0))
    await harness.send(evict("job-y", grace=1.0))
    assert datetime.now(UTC) - t0 < timedelta(seconds=0.5)  # handling does not wait out the grace
    await harness.until(lambda: len(harness.sink.payloads(EvictAck)) == 2)
    assert datetime.now(UTC) - t0 < timedelta(seconds=1.9)  # both graces ran side by side


async def test_evicting_a_task_that_is_not_here_is_not_running(harness: AgentHarness) -> None:
    await harness.send(evict("job-nowhere"))
    await harness.until(lambda: bool(harness.sink.payloads(EvictAck)))
    assert harness.sink.payloads(EvictAck)[0].outcome is EvictOutcome.NOT_RUNNING


async def test_a_repeated_command_is_answered_again_never_acted_on_twice(harness: AgentHarness) -> None:
    command = bind("job-d")
    await harness.send(command)
    await harness.send(command)
    started = harness.sink.payloads(WorkerStarted)
    assert len(started) == 2 and started[0] == started[1]  # the same ack, the same pid
    assert len(harness.agent.journal.live_workers("job-d")) == 1
    await _running(harness, "job-d")
    eviction = evict("job-d", grace=2.0)
    await harness.send(eviction)
    await harness.send(eviction)  # still in its grace period: no second ack yet, no second signal
    await harness.until(lambda: bool(harness.sink.payloads(EvictAck)))
    await harness.send(eviction)
    acks = harness.sink.payloads(EvictAck)
    assert len(acks) == 2 and acks[0] == acks[1]
    assert _log(harness, "job-d").count("checkpointed") == 1


async def test_rejected_commands_are_counted_and_do_nothing(harness: AgentHarness) -> None:
    forged = bind("job-e").model_copy(update={"signature": "ab" * 32})
    tampered = bind("job-e")
    tampered = tampered.model_copy(update={"command": ("sh", "-c", "echo pwned")})
    stale = bind("job-e", issued_at=datetime.now(UTC) - timedelta(hours=1))
    future = evict("job-e", issued_at=datetime.now(UTC) + timedelta(minutes=5))
    wrong_node = evict("job-e", node="node-8")  # signed, but for another node
    for command in (forged, tampered, stale, future, wrong_node):
        await harness.send(command)
    assert harness.sink.sent == []
    assert harness.agent.journal.state.workers == {}
    assert harness.agent.metrics.rejections == {
        Rejection.SIGNATURE_MISMATCH: 2, Rejection.STALE: 1, Rejection.FUTURE: 1, Rejection.WRONG_NODE: 1,
    }  # fmt: skip
    # A forged command does not claim its id: the genuine one with that id still runs.
    genuine = bind("job-e", command_id=forged.command_id)
    await harness.send(genuine)
    assert len(harness.sink.payloads(WorkerStarted)) == 1


async def test_a_program_that_cannot_start_exits_127(harness: AgentHarness) -> None:
    await harness.send(bind("job-f", command=("/nonexistent/program",)))
    await harness.send(bind("job-g", gpus=(7,)))  # the node has 4 GPUs
    exits = harness.sink.payloads(WorkerExited)
    assert [e.exit_code for e in exits] == [NOT_STARTED_EXIT_CODE] * 2
    assert "No such file" in exits[0].detail and "do not exist" in exits[1].detail
    assert harness.sink.payloads(WorkerStarted) == []


async def test_a_restarted_agent_readopts_its_workers_and_resumes_evictions(
    harness: AgentHarness, tmp_path: Path
) -> None:
    await harness.send(bind("job-h"))
    await harness.send(bind("job-i", "--ignore-sigterm"))
    await _running(harness, "job-h")
    await _running(harness, "job-i")
    pending = evict("job-i", grace=1.0)
    await harness.send(pending)
    await harness.crash()  # "kill -9" in its grace period: accepted, not acked
    pids = {w.task_id: w.pid for w in harness.agent.journal.live_workers()}

    again = start_agent(harness.state_dir)
    try:
        await again.agent.recover()
        assert {w.task_id: w.pid for w in again.agent.journal.live_workers()} == pids
        # The resumed eviction ends with the grace it had, then a SIGKILL.
        await again.until(lambda: bool(again.sink.payloads(EvictAck)))
        assert again.sink.payloads(EvictAck)[0].outcome is EvictOutcome.KILLED
        # A later eviction stops the re-adopted (not a child any more) worker; its exit is reported.
        await again.send(evict("job-h", grace=5.0))
        await again.until(lambda: len(again.sink.payloads(EvictAck)) == 2)
        assert again.sink.payloads(EvictAck)[1].outcome is EvictOutcome.CHECKPOINTED
        await again.until(lambda: len(again.sink.payloads(WorkerExited)) == 2)
        exits = {e.task_id: e for e in again.sink.payloads(WorkerExited)}
        assert exits["job-h"].exit_code == UNKNOWN_EXIT_CODE and exits["job-h"].evicted
        assert "re-adopted" in exits["job-h"].detail
        assert not again.agent.journal.live_workers()
    finally:
        await again.crash()


async def test_a_worker_forked_just_before_a_crash_is_found_by_its_marker(harness: AgentHarness) -> None:
    await harness.send(bind("job-j"))
    await _running(harness, "job-j")
    await harness.crash()
    # Rewind the journal to the moment between fork and recording the pid.
    (worker,) = harness.agent.journal.live_workers()
    pid, ticks = worker.pid, worker.start_ticks
    worker.pid = worker.start_ticks = worker.started_at = None
    worker.started_acked = False
    harness.agent.journal.save()
    again = start_agent(harness.state_dir)
    try:
        await again.agent.recover()
        (adopted,) = again.agent.journal.live_workers()
        assert (adopted.pid, adopted.start_ticks) == (pid, ticks)
        assert [s.pid for s in again.sink.payloads(WorkerStarted)] == [pid]
    finally:
        await again.crash()
        assert pid is not None and ticks is not None
        procs.signal_group(pid, ticks, procs.signal.SIGKILL)


async def test_a_bind_arriving_after_its_tasks_eviction_never_starts(harness: AgentHarness) -> None:
    # Bind and evict travel on different topics: the eviction (issued later) may arrive first.
    early = bind("job-late", "--duration", "30")
    await harness.send(evict("job-late"))
    await harness.send(early)
    assert not harness.sink.payloads(WorkerStarted)
    (exited,) = harness.sink.payloads(WorkerExited)
    assert exited.evicted and exited.exit_code == NOT_STARTED_EXIT_CODE
    # A bind issued after that eviction (the task placed again) starts normally.
    await harness.send(bind("job-late", "--duration", "0.2"))
    assert [s.task_id for s in harness.sink.payloads(WorkerStarted)] == ["job-late"]


async def test_every_message_the_agent_sends_is_signed_with_its_node_key(harness: AgentHarness) -> None:
    # Issue 22 item 1: the scheduler applies acks and telemetry only from the node they name.
    await harness.send(bind("job-s", "--duration", "0.2"))
    await harness.until(lambda: bool(harness.sink.payloads(WorkerExited)))
    await harness.send(evict("job-gone"))
    await harness.until(lambda: bool(harness.sink.payloads(EvictAck)))
    await harness.agent.publish_telemetry()
    # As the scheduler reads them: the JSON on the wire, decoded again (the canonical form).
    sent = [
        decode(topic_name, encode(env)).payload
        for topic_name, env in harness.sink.sent
        if isinstance(env.payload, SIGNED_TYPES)
    ]
    kinds = {type(p).__name__ for p in sent}
    assert kinds == {"WorkerStarted", "WorkerExited", "EvictAck", "NodeTelemetry"}
    assert all(check_signature(p, key=KEY) is SignatureCheck.VALID for p in sent)


async def test_a_reaped_worker_leaves_nothing_behind_in_the_supervisor(harness: AgentHarness) -> None:
    """The exit events of workers nobody waits for any more are dropped (they grew by one per
    worker ever run: the agent's slow RSS growth in the hour's soak)."""
    await harness.send(bind("job-e", "--duration", "0.1"))
    await harness.until(lambda: bool(harness.sink.payloads(WorkerExited)))
    assert harness.agent.supervisor._exited == {}
