"""The agent on the controllable clock (topic mode), with a recording sink and real fake tasks:
ADVANCE moves the workers' clock and is answered once each worker exited or saw it, with the exits
published first; acks carry sim time; freshness is judged on sim time. Also the worker environment
both modes share (restart overhead, per-task checkpoint folder)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import pytest_asyncio

from gfs.schemas.clock import CLOCK_KEY, ClockAck, ClockPhase, ClockTick
from gfs.schemas.commands import EvictAck, EvictOutcome
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.node_agent.clock_ticks import CLOCK_ACK_TOPIC
from gfs.services.node_agent.journal import Journal
from gfs.services.node_agent.settings import NodeAgentSettings
from gfs.services.node_agent.sim_clock import SimClock
from tests.unit.node_agent.conftest import NODE, AgentHarness, bind, evict, start_agent, worker_env

# Far from the wall clock on purpose: a command issued at T0 is fresh only on the sim clock.
T0 = datetime(2030, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Ticks:
    def __init__(self) -> None:
        self.sequence = 0

    def __call__(self, when: datetime, phase: ClockPhase = ClockPhase.ADVANCE) -> ClockTick:
        self.sequence += 1
        return ClockTick(clock=CLOCK_KEY, at=when, sequence=self.sequence, phase=phase)


@pytest_asyncio.fixture
async def sim(tmp_path: Path, kill_leftovers: Callable[[Journal], None]) -> AsyncIterator[AgentHarness]:
    state_dir = tmp_path / "agent"
    clock = SimClock(state_dir, wall=lambda: datetime.now(UTC))
    h = start_agent(
        state_dir,
        clock=clock.now,
        sim_clock=clock,
        checkpoint_root=tmp_path / "checkpoints",
        clock_wait_s=10.0,
    )
    try:
        yield h
    finally:
        await h.crash()
        kill_leftovers(h.agent.journal)


def clock_acks(h: AgentHarness) -> list[ClockAck]:
    return [env.payload for topic, env in h.sink.sent if topic == CLOCK_ACK_TOPIC]


def state_of(tmp_path: Path, task: str) -> float:
    return float(
        json.loads((tmp_path / "checkpoints" / task / "0" / "sim-state.json").read_text())["remaining"]
    )


async def test_advance_moves_the_workers_and_reports_their_exit_before_the_ack(
    sim: AgentHarness, tmp_path: Path
) -> None:
    tick = Ticks()
    first = await sim.agent.on_tick(tick(at(0)))
    assert first == ClockAck(
        clock=CLOCK_KEY, component=f"node-agent/{NODE}", sequence=1, at=at(0), exited=(), next_exit_at=None
    )
    assert (tmp_path / "agent" / "sim-clock").read_text() == repr(at(0).timestamp())

    await sim.send(bind("job", "--duration", "600", issued_at=at(0), checkpoint_interval_s=300.0))
    (started,) = sim.sink.payloads(WorkerStarted)
    assert started.started_at == at(0)  # sim time, not the wall clock

    ack = await sim.agent.on_tick(tick(at(300)))
    assert ack is not None and (ack.exited, ack.next_exit_at) == ((), at(600))
    assert state_of(tmp_path, "job") == 300.0  # the checkpoint at +300, before the answer

    before = len(sim.sink.sent)
    ack = await sim.agent.on_tick(tick(at(600)))
    assert ack is not None and (ack.exited, ack.next_exit_at) == (("job/0",), None)
    topics = [topic for topic, _ in sim.sink.sent[before:]]
    assert topics == ["gfs.commands.worker-ack", CLOCK_ACK_TOPIC]  # the exit first
    (exited,) = sim.sink.payloads(WorkerExited)
    assert (exited.exit_code, exited.evicted, exited.exited_at) == (0, False, at(600))

    # STATUS and PASS are not the agent's; a repeated sequence is ignored.
    sent = len(sim.sink.sent)
    assert await sim.agent.on_tick(tick(at(600), ClockPhase.STATUS)) is None
    assert await sim.agent.on_tick(tick(at(600), ClockPhase.PASS)) is None
    repeat = ClockTick(clock=CLOCK_KEY, at=at(900), sequence=2, phase=ClockPhase.ADVANCE)
    assert await sim.agent.on_tick(repeat) is None
    # Another driver's clock on the same topic is not ours.
    other = ClockTick(clock="other", at=at(900), sequence=99, phase=ClockPhase.ADVANCE)
    assert await sim.agent.on_tick(other) is None
    assert len(sim.sink.sent) == sent
    assert sim.agent.clock() == at(600)


async def test_evicted_at_a_tick_then_restarted_from_the_checkpoint_with_the_overhead(
    sim: AgentHarness, tmp_path: Path
) -> None:
    tick = Ticks()
    await sim.agent.on_tick(tick(at(0)))
    await sim.send(bind("job", "--duration", "1000", issued_at=at(0), checkpoint_interval_s=300.0))
    ack = await sim.agent.on_tick(tick(at(700)))
    assert ack is not None and ack.next_exit_at == at(1000)
    assert state_of(tmp_path, "job") == 400.0  # checkpoints at +300 and +600

    eviction = evict("job", grace=5.0, issued_at=at(700))
    await sim.send(eviction)
    await sim.until(lambda: bool(sim.sink.payloads(EvictAck)) and bool(sim.sink.payloads(WorkerExited)))
    (evict_ack,) = sim.sink.payloads(EvictAck)
    assert (evict_ack.outcome, evict_ack.acked_at) == (EvictOutcome.CHECKPOINTED, at(700))
    (gone,) = sim.sink.payloads(WorkerExited)
    assert (gone.evicted, gone.exited_at) == (True, at(700))
    assert state_of(tmp_path, "job") == 400.0  # the 100 s since +600 are lost

    ack = await sim.agent.on_tick(tick(at(800)))
    assert ack is not None and (ack.exited, ack.next_exit_at) == ((), None)  # an eviction is no exit
    restart = bind(
        "job", "--duration", "1000", issued_at=at(800), checkpoint_interval_s=300.0, restart_overhead_s=40.0
    )
    await sim.send(restart)
    ack = await sim.agent.on_tick(tick(at(1100)))
    # need = 400 + 40 from +800: exits at +1240; the checkpoint at +1100 leaves 140.
    assert ack is not None and (ack.exited, ack.next_exit_at) == ((), at(1240))
    assert state_of(tmp_path, "job") == 140.0
    ack = await sim.agent.on_tick(tick(at(1240)))
    assert ack is not None and ack.exited == ("job/0",)
    last = sim.sink.payloads(WorkerExited)[-1]
    assert (last.command_id, last.exit_code, last.evicted, last.exited_at) == (
        restart.command_id, 0, False, at(1240),
    )  # fmt: skip


async def test_freshness_is_judged_on_sim_time(sim: AgentHarness) -> None:
    await sim.agent.on_tick(Ticks()(at(0)))
    await sim.send(bind("wall", "--duration", "5", issued_at=datetime.now(UTC)))  # years before T0
    await sim.send(bind("ahead", "--duration", "5", issued_at=at(3600)))
    assert sim.agent.metrics.rejections == {"stale": 1, "future": 1}
    assert sim.sink.payloads(WorkerStarted) == []


async def test_a_worker_that_ignores_the_clock_is_waited_for_then_answered_anyway(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kill_leftovers: Callable[[Journal], None]
) -> None:
    state_dir = tmp_path / "agent"
    clock = SimClock(state_dir, wall=lambda: datetime.now(UTC))
    h = start_agent(state_dir, clock=clock.now, sim_clock=clock, clock_wait_s=0.3)
    try:
        await h.agent.on_tick(Ticks()(at(0)))
        await h.send(bind("deaf", issued_at=at(0), command=("sleep", "30")))
        with caplog.at_level(logging.ERROR):
            tick = ClockTick(clock=CLOCK_KEY, at=at(60), sequence=2, phase=ClockPhase.ADVANCE)
            ack = await h.agent.on_tick(tick)
        assert ack is not None and (ack.exited, ack.next_exit_at) == ((), None)
        assert "neither exited nor saw it" in caplog.text
    finally:
        await h.crash()
        kill_leftovers(h.agent.journal)


async def test_workers_get_the_clock_files_the_overhead_and_their_checkpoint_folder(
    sim: AgentHarness, tmp_path: Path
) -> None:
    await sim.agent.on_tick(Ticks()(at(0)))
    env_file = tmp_path / "env.json"
    await sim.send(bind("job/x", "--env-file", str(env_file), issued_at=at(0), restart_overhead_s=40.0))
    await sim.until(env_file.exists)
    env = json.loads(env_file.read_text())
    assert env["GFS_SIM_CLOCK_FILE"] == str(tmp_path / "agent" / "sim-clock")
    assert float(env["GFS_SIM_START"]) == at(0).timestamp()
    (started,) = sim.sink.payloads(WorkerStarted)
    assert env["GFS_CLOCK_SEEN_FILE"] == str(
        tmp_path / "agent" / "clock-seen" / f"{started.command_id}.0.json"
    )
    assert env["GFS_RESTART_OVERHEAD_S"] == "40.0"
    # One folder per task and worker ("/" in a task id escaped), so a restart finds its checkpoint.
    assert env["GFS_CHECKPOINT_DIR"] == str(tmp_path / "checkpoints" / "job%2Fx" / "0")


async def test_wall_mode_passes_the_overhead_and_never_the_sim_clock(
    tmp_path: Path, kill_leftovers: Callable[[Journal], None]
) -> None:
    state_dir = tmp_path / "agent"
    h = start_agent(
        state_dir,
        checkpoint_root=tmp_path / "checkpoints",
        worker_env={**worker_env(), "GFS_SIM_CLOCK_FILE": "/nowhere", "GFS_RESTART_OVERHEAD_S": "9"},
    )
    try:
        with_overhead, without = tmp_path / "with.json", tmp_path / "without.json"
        await h.send(bind("a", "--env-file", str(with_overhead), restart_overhead_s=12.5))
        await h.send(bind("b", "--env-file", str(without)))
        await h.until(lambda: with_overhead.exists() and without.exists())
        env_a, env_b = json.loads(with_overhead.read_text()), json.loads(without.read_text())
        assert env_a["GFS_RESTART_OVERHEAD_S"] == "12.5"
        assert "GFS_RESTART_OVERHEAD_S" not in env_b  # None: absent, not inherited
        assert not {"GFS_SIM_CLOCK_FILE", "GFS_SIM_START", "GFS_CLOCK_SEEN_FILE"} & (
            env_a.keys() | env_b.keys()
        )
        assert env_b["GFS_CHECKPOINT_DIR"] == str(tmp_path / "checkpoints" / "b" / "0")
        assert os.path.isdir(env_b["GFS_CHECKPOINT_DIR"])
        assert await h.agent.on_tick(Ticks()(at(0))) is None  # no sim clock: ticks mean nothing
    finally:
        await h.crash()
        kill_leftovers(h.agent.journal)


def test_the_clock_settings_and_their_environment_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    default = NodeAgentSettings()
    assert (default.agent_clock, default.agent_clock_name, default.agent_checkpoint_root) == (
        "wall",
        "clock",
        None,
    )
    assert default.checkpoint_root(tmp_path) == tmp_path / "checkpoints"
    monkeypatch.setenv("GFS_AGENT_CLOCK", "topic")
    monkeypatch.setenv("GFS_AGENT_CHECKPOINT_ROOT", str(tmp_path / "shared"))
    monkeypatch.setenv("GFS_AGENT_CLOCK_WAIT_S", "5")
    topic = NodeAgentSettings()
    assert (topic.agent_clock, topic.agent_clock_wait_s) == ("topic", 5.0)
    assert topic.checkpoint_root(tmp_path / "state") == tmp_path / "shared"
    monkeypatch.setenv("GFS_AGENT_CLOCK", "sundial")
    with pytest.raises(ValueError, match="wall"):
        NodeAgentSettings()
