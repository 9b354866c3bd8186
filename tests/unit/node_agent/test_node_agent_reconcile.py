"""The agent's half of reconciliation (issue 22 item 7): its heartbeat reports the workers it runs
with their attempts, and a bind the service issued again (a new command id for the same attempt)
never starts a second copy of a worker that already runs."""

from __future__ import annotations

from gfs.schemas.telemetry import NodeTelemetry, RunningWorker
from gfs.schemas.workers import WorkerStarted
from tests.unit.node_agent.conftest import AgentHarness, bind


async def test_the_heartbeat_reports_each_running_worker_with_its_attempt(harness: AgentHarness) -> None:
    assert harness.agent.telemetry().running == ()  # nothing runs: an empty report, not null
    await harness.send(bind("job-r", "--duration", "30", attempt=3))
    await harness.send(bind("job-old", "--duration", "30", gpus=(1,)))  # a command without attempt
    sample = harness.agent.telemetry()
    assert isinstance(sample, NodeTelemetry)
    assert sample.running == (
        RunningWorker(task_id="job-old", attempt=None, worker_index=0),
        RunningWorker(task_id="job-r", attempt=3, worker_index=0),
    )


async def test_a_bind_issued_again_for_a_running_attempt_does_not_start_it_twice(
    harness: AgentHarness,
) -> None:
    first = bind("job-x", "--duration", "30", attempt=2)
    await harness.send(first)
    again = bind("job-x", "--duration", "30", attempt=2)  # a new id: the service saw no start in time
    await harness.send(again)
    assert len(harness.agent.journal.live_workers("job-x")) == 1
    started = harness.sink.payloads(WorkerStarted)
    # Its WorkerStarted is published again (the same worker, the same pid, the first command's id).
    assert len(started) == 2 and started[0] == started[1] and started[1].command_id == first.command_id
    # Another attempt of the task is a different run: it starts.
    await harness.send(bind("job-x", "--duration", "30", attempt=3, gpus=(1,)))
    assert len(harness.agent.journal.live_workers("job-x")) == 2
