"""Node agents on the controllable clock, on the real broker: ClockTicks in on gfs.control.clock,
signed commands issued at sim time, real `fake-task` workers following the agent's clock file;
ClockAcks out on gfs.control.clock-acks with each exit published before the ack that lists it.

Each test drives its own clock (a unique ClockTick.clock name the agents are set to follow), so
another driver on the shared topic never moves these agents; node names are unique too."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from live_harness import Tap
from node_agent_world import WAIT_S, _kill_workers, _node, _settings, _signed, agent_in_process
from node_agent_world import _bind as _bind_command
from node_agent_world import _evict as _evict_command

from gfs.schemas.clock import ClockAck, ClockPhase, ClockTick
from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome
from gfs.schemas.envelope import wrap
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.node_agent.service import AgentOptions
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport

pytestmark = pytest.mark.integration

WORKER_ACKS = "gfs.commands.worker-ack"
READ_TOPICS = (WORKER_ACKS, "gfs.commands.evict-ack", "gfs.control.clock-acks")
# Years away from the wall clock: the agents accept these commands only on the sim clock.
T0 = datetime(2031, 6, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Seen:
    """Records read from the ack topics (by `tap`), in arrival order, with their Kafka coordinates."""

    def __init__(self, tap: Tap) -> None:
        self.tap = tap

    @property
    def records(self) -> list[tuple[Any, str, int, int, int]]:  # payload, topic, part, off, ts
        return [(r.envelope.payload, r.topic, r.partition, r.offset, r.timestamp) for r in self.tap.records]

    def of(self, kind: type[Any], node: str | None = None) -> list[Any]:
        return [
            r[0]
            for r in self.records
            if isinstance(r[0], kind) and (node is None or getattr(r[0], "node", None) == node)
        ]

    def where(self, payload: Any) -> tuple[str, int, int, int]:
        return next(r[1:] for r in self.records if r[0] == payload)

    async def until(self, predicate: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out waiting for {what}; seen {[type(r[0]).__name__ for r in self.records]}"
                )
            await asyncio.sleep(0.02)


@pytest_asyncio.fixture(loop_scope="session")
async def seen(kafka_bootstrap: str, registry_topics: TopicsReport) -> AsyncIterator[Seen]:
    tap = await Tap(kafka_bootstrap, READ_TOPICS).start()
    try:
        yield Seen(tap)
    finally:
        await tap.stop()


def _bind(node: str, task_id: str, issued_at: datetime, *args: str, **changes: Any) -> BindCommand:
    return _signed(_bind_command(node, task_id, *args, issued_at=issued_at, **changes), node)


def _evict(node: str, task_id: str, issued_at: datetime) -> EvictCommand:
    return _signed(_evict_command(node, task_id, grace=5.0, issued_at=issued_at), node)


class Driver:
    """Publishes one clock's ticks and commands, and waits for the agents' answers."""

    def __init__(self, producer: EnvelopeProducer, seen: Seen, nodes: list[str]) -> None:
        self.producer = producer
        self.seen = seen
        self.name = f"it-clock-{uuid.uuid4().hex[:8]}"
        self.components = {f"node-agent/{node}" for node in nodes}
        self.sequence = 0

    async def command(self, command: BindCommand | EvictCommand) -> None:
        name = "gfs.commands.bind" if isinstance(command, BindCommand) else "gfs.commands.evict"
        await self.producer.send(name, wrap(command, producer="it"))

    async def advance(self, when: datetime) -> dict[str, ClockAck]:
        """ADVANCE to `when`; every agent's ClockAck for it, by node."""
        self.sequence += 1
        tick = ClockTick(clock=self.name, at=when, sequence=self.sequence, phase=ClockPhase.ADVANCE)
        await self.producer.send("gfs.control.clock", wrap(tick, producer="it", occurred_at=when))
        sequence = self.sequence

        def answers() -> dict[str, ClockAck]:
            return {
                ack.component.removeprefix("node-agent/"): ack
                for ack in self.seen.of(ClockAck)
                if ack.clock == self.name and ack.sequence == sequence and ack.component in self.components
            }

        await self.seen.until(lambda: len(answers()) == len(self.components), f"the acks of tick {sequence}")
        found = answers()
        assert all(ack.at == when for ack in found.values())
        return found


@contextlib.asynccontextmanager
async def _agent(
    kafka: str, tmp_path: Path, node: str, clock_name: str, checkpoints: Path
) -> AsyncIterator[Path]:
    """An in-process agent on the topic clock `clock_name`; yields its state dir."""
    state_dir = tmp_path / node
    settings = _settings(
        kafka, tmp_path, agent_clock="topic", agent_clock_name=clock_name,
        agent_checkpoint_root=checkpoints, agent_clock_wait_s=20.0,
    )  # fmt: skip
    options = AgentOptions(
        node=node, gpu_model="IT-GPU", gpus=2, fake_gpus=True, telemetry_s=5.0, state_dir=state_dir
    )
    try:
        async with agent_in_process(settings, options):
            yield state_dir
    finally:
        _kill_workers(state_dir)


async def _published_before(seen: Seen, exit_ack: WorkerExited, clock_ack: ClockAck) -> None:
    """The WorkerExited was in the log before the ClockAck was sent: stamped no later, and below
    the end offset its partition had when the ClockAck was read."""
    name, partition, offset, stamp = seen.where(exit_ack)
    assert name == WORKER_ACKS
    assert offset < await seen.tap.end_offset(name, partition)
    assert stamp <= seen.where(clock_ack)[3]


async def test_ticks_move_a_fake_task_to_its_checkpoint_and_its_exit(
    kafka_bootstrap: str,
    publisher: EnvelopeProducer,
    seen: Seen,
    tmp_path: Path,
) -> None:
    node = _node("it-clk")
    driver = Driver(publisher, seen, [node])
    async with _agent(kafka_bootstrap, tmp_path, node, driver.name, tmp_path / "checkpoints") as state_dir:
        first = (await driver.advance(at(0)))[node]
        assert (first.exited, first.next_exit_at) == ((), None)
        assert (state_dir / "sim-clock").read_text() == repr(at(0).timestamp())

        bind = _bind(node, "steady", at(0), "--duration", "600", checkpoint_interval_s=300.0)
        await driver.command(bind)
        await seen.until(lambda: bool(seen.of(WorkerStarted, node)), "WorkerStarted")
        assert seen.of(WorkerStarted, node)[0].started_at == at(0)

        midway = (await driver.advance(at(300)))[node]
        assert (midway.exited, midway.next_exit_at) == ((), at(600))
        state = tmp_path / "checkpoints" / "steady" / "0" / "sim-state.json"
        assert state.read_text() == '{"remaining": 300.0}'
        assert seen.of(WorkerExited, node) == []

        end = (await driver.advance(at(600)))[node]
        assert (end.exited, end.next_exit_at) == (("steady/0",), None)
        # Published (and delivered) before the ack that lists it: already read, or in the log.
        await seen.until(lambda: bool(seen.of(WorkerExited, node)), "WorkerExited")
        (exited,) = seen.of(WorkerExited, node)
        assert (exited.command_id, exited.exit_code, exited.evicted, exited.exited_at) == (
            bind.command_id, 0, False, at(600),
        )  # fmt: skip
        await _published_before(seen, exited, end)


async def test_evicted_at_a_tick_and_resumed_on_another_node_from_its_checkpoint(
    kafka_bootstrap: str,
    publisher: EnvelopeProducer,
    seen: Seen,
    tmp_path: Path,
) -> None:
    first_node, second_node = _node("it-clk"), _node("it-clk")
    driver = Driver(publisher, seen, [first_node, second_node])
    shared = tmp_path / "checkpoints"  # one root for both agents: the checkpoint follows the task
    async with (
        _agent(kafka_bootstrap, tmp_path, first_node, driver.name, shared),
        _agent(kafka_bootstrap, tmp_path, second_node, driver.name, shared),
    ):
        await driver.advance(at(0))
        await driver.command(
            _bind(first_node, "mover", at(0), "--duration", "1000", checkpoint_interval_s=300.0)
        )
        await seen.until(lambda: bool(seen.of(WorkerStarted, first_node)), "the first WorkerStarted")
        acks = await driver.advance(at(700))
        assert (acks[first_node].exited, acks[first_node].next_exit_at) == ((), at(1000))
        assert acks[second_node].next_exit_at is None

        # Evicted at +700: checkpoints at +300 and +600 leave 400 s; the 100 s since are lost.
        await driver.command(_evict(first_node, "mover", at(700)))
        await seen.until(lambda: bool(seen.of(EvictAck, first_node)), "the EvictAck")
        (evicted,) = seen.of(EvictAck, first_node)
        assert (evicted.outcome, evicted.acked_at) == (EvictOutcome.CHECKPOINTED, at(700))
        await seen.until(lambda: bool(seen.of(WorkerExited, first_node)), "the evicted worker's exit")
        (gone,) = seen.of(WorkerExited, first_node)
        assert (gone.evicted, gone.exited_at) == (True, at(700))
        assert (shared / "mover" / "0" / "sim-state.json").read_text() == '{"remaining": 400.0}'

        acks = await driver.advance(at(800))
        assert all(ack.exited == () for ack in acks.values())  # an eviction is not an exit

        # Restarted on the other node at +800 with a 40 s overhead: need 440, exit at +1240.
        restart = _bind(
            second_node,
            "mover",
            at(800),
            "--duration",
            "1000",
            checkpoint_interval_s=300.0,
            restart_overhead_s=40.0,
        )
        await driver.command(restart)
        await seen.until(lambda: bool(seen.of(WorkerStarted, second_node)), "the second WorkerStarted")
        acks = await driver.advance(at(1100))
        assert (acks[second_node].exited, acks[second_node].next_exit_at) == ((), at(1240))
        assert (shared / "mover" / "0" / "sim-state.json").read_text() == '{"remaining": 140.0}'

        acks = await driver.advance(at(1240))
        assert (acks[second_node].exited, acks[first_node].exited) == (("mover/0",), ())
        await seen.until(lambda: bool(seen.of(WorkerExited, second_node)), "the finish")
        (done,) = seen.of(WorkerExited, second_node)
        assert (done.command_id, done.exit_code, done.evicted, done.exited_at) == (
            restart.command_id, 0, False, at(1240),
        )  # fmt: skip
        await _published_before(seen, done, acks[second_node])
