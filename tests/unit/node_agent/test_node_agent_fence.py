"""Self-fencing (services/node_agent/fence.py) with real `fake-task` workers and a recording sink:
frozen after the fence delay with no acknowledged heartbeat, thawed by contact within the thaw
window, killed and reported evicted by contact after it, killed at a restart that finds them
frozen. The agent's monotonic clock is a hand-moved one."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from gfs.schemas.workers import WorkerExited
from gfs.services.node_agent import procs
from gfs.services.node_agent.journal import WorkerEntry
from gfs.services.node_agent.settings import NodeAgentSettings
from tests.unit.node_agent.conftest import AgentHarness, _kill_leftovers, bind, start_agent


class Clock:
    def __init__(self) -> None:
        self.t = time.monotonic() + 1.0  # ahead of the fence's start (its first contact)

    def __call__(self) -> float:
        return self.t


def _fenced_agent(tmp_path: Path, clock: Clock, *, after_s: float = 15.0) -> AgentHarness:
    h = start_agent(tmp_path / "agent", fence_after_s=after_s, fence_thaw_within_s=20.0)
    h.agent.fence.monotonic = h.agent.heartbeat.monotonic = clock
    h.agent.fence.acknowledged(clock())  # contact at the clock's start
    return h


def _state(worker: WorkerEntry) -> str:
    assert worker.pid is not None
    stat = procs.read_stat(worker.pid)
    return "gone" if stat is None else stat.state


async def _one_running(h: AgentHarness, task: str) -> WorkerEntry:
    command = bind(task, "--duration", "60", attempt=1)
    await h.send(command)
    (worker,) = h.agent.journal.live_workers(task)
    await h.until(lambda: _state(worker) in ("S", "R"))
    return worker


async def test_a_cut_shorter_than_the_thaw_window_pauses_the_workers_and_loses_nothing(
    tmp_path: Path,
) -> None:
    clock = Clock()
    h = _fenced_agent(tmp_path, clock)
    try:
        worker = await _one_running(h, "job-f")
        clock.t += 14.9
        assert h.agent.fence.check() == []  # not yet
        clock.t += 0.2  # 15.1 s without an acknowledged heartbeat
        assert [w.key for w in h.agent.fence.check()] == [worker.key]
        assert _state(worker) == "T" and worker.frozen_at is not None
        assert h.agent.fence.check() == []  # frozen once
        clock.t += 4.0  # contact 19.1 s after the last: the service cannot have declared the node lost
        await h.agent.publish_telemetry()
        assert _state(worker) in ("S", "R") and worker.frozen_at is None and worker.live
        assert (h.agent.fence.frozen, h.agent.fence.thawed, h.agent.fence.killed) == (1, 1, 0)
        assert not h.sink.payloads(WorkerExited)
    finally:
        await h.crash()
        _kill_leftovers(h.agent.journal)


async def test_a_longer_cut_kills_the_frozen_workers_reports_them_evicted_and_revokes_the_attempt(
    tmp_path: Path,
) -> None:
    clock = Clock()
    h = _fenced_agent(tmp_path, clock)
    try:
        worker = await _one_running(h, "job-g")
        clock.t += 16.0
        h.agent.fence.check()
        clock.t += 5.0  # contact 21 s after the last acknowledged heartbeat
        await h.agent.publish_telemetry()
        await h.until(lambda: bool(h.sink.payloads(WorkerExited)))
        (exited,) = h.sink.payloads(WorkerExited)
        assert exited.evicted and exited.attempt == 1 and exited.detail.startswith("fenced: ")
        assert h.agent.fence.killed == 1 and not worker.live
        assert 1 in h.agent.journal.state.revoked["job-g"]
        # The same attempt bound again (a re-issued bind) never starts here.
        await h.send(bind("job-g", "--duration", "60", attempt=1))
        assert not h.agent.journal.live_workers("job-g")
    finally:
        await h.crash()
        _kill_leftovers(h.agent.journal)


async def test_a_restart_that_finds_a_worker_frozen_kills_it(tmp_path: Path) -> None:
    clock = Clock()
    h = _fenced_agent(tmp_path, clock)
    try:
        worker = await _one_running(h, "job-r")
        clock.t += 16.0
        h.agent.fence.check()
        await h.crash()
        again = start_agent(tmp_path / "agent", fence_after_s=15.0)
        h = again
        await again.agent.recover()
        await again.until(lambda: bool(again.sink.payloads(WorkerExited)))
        (exited,) = again.sink.payloads(WorkerExited)
        assert exited.evicted and exited.detail == "fenced: still frozen when the agent started again"
        assert _state(worker) in ("gone", "Z")
    finally:
        await h.crash()
        _kill_leftovers(h.agent.journal)


async def test_off_it_never_freezes(tmp_path: Path) -> None:
    clock = Clock()
    h = _fenced_agent(tmp_path, clock, after_s=0.0)
    try:
        worker = await _one_running(h, "job-o")
        clock.t += 3600.0
        assert h.agent.fence.check() == [] and _state(worker) in ("S", "R")
    finally:
        await h.crash()
        _kill_leftovers(h.agent.journal)


def test_the_thaw_window_must_exceed_the_delay() -> None:
    with pytest.raises(ValidationError, match="AGENT_FENCE_THAW_WITHIN_S"):
        NodeAgentSettings(agent_fence_after_s=20.0, agent_fence_thaw_within_s=20.0)
    assert (
        NodeAgentSettings(agent_fence_after_s=0.0, agent_fence_thaw_within_s=1.0).agent_fence_after_s == 0.0
    )


def test_the_fence_is_off_where_it_cannot_work() -> None:
    from gfs.services.node_agent.service import AgentOptions, _fence_delay

    settings = NodeAgentSettings(agent_fence_after_s=15.0)
    every_5 = AgentOptions(node="n", telemetry_s=5.0)
    assert _fence_delay(settings, every_5, topic_clock=False) == 15.0
    assert _fence_delay(settings, every_5, topic_clock=True) == 0.0  # the service never loses a node
    rare = AgentOptions(node="n", telemetry_s=86400.0)  # a parity run's agents
    assert _fence_delay(settings, rare, topic_clock=False) == 0.0
