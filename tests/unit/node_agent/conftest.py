"""Fixtures for the node agent's unit tests: a recording ack sink, signed command builders, and an
agent over a temporary journal that starts real `fake-task` processes."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from gfs.schemas.commands import BindCommand, EvictCommand
from gfs.schemas.envelope import Envelope, wrap
from gfs.schemas.tasks import EvictionReason, Placement, TaskClass
from gfs.services.node_agent import procs
from gfs.services.node_agent.agent import AgentMetrics, NodeAgent
from gfs.services.node_agent.gpu import FakeGpuBackend
from gfs.services.node_agent.journal import Journal
from gfs.services.node_agent.security import CommandGuard
from gfs.services.platform.metrics import configure_metrics
from gfs.services.platform.signing import sign

NODE = "node-7"
KEY = bytes(range(32))
REPO = Path(__file__).resolve().parents[3]


def fake_task_argv(*args: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "gfs.services.node_agent.fake_task", *args)


@dataclass
class RecordingSink:
    sent: list[tuple[str, Envelope[Any]]] = field(default_factory=list)

    async def send(self, topic_name: str, envelope: Envelope[Any]) -> object:
        self.sent.append((topic_name, envelope))
        return None

    def payloads(self, kind: type[Any]) -> list[Any]:
        return [env.payload for _, env in self.sent if isinstance(env.payload, kind)]


def bind(task_id: str, *args: str, gpus: tuple[int, ...] = (0,), **changes: Any) -> BindCommand:
    fields: dict[str, Any] = {
        "command_id": uuid.uuid4(),
        "node": NODE,
        "task_id": task_id,
        "task_class": TaskClass.SPOT,
        "placements": (Placement(worker_index=0, node=NODE, gpu_indices=gpus),),
        "command": fake_task_argv(*args),
        "issued_at": datetime.now(UTC),
    }
    return sign(BindCommand(**(fields | changes)), key=KEY)


def evict(*task_ids: str, grace: float = 1.0, **changes: Any) -> EvictCommand:
    fields: dict[str, Any] = {
        "command_id": uuid.uuid4(),
        "node": NODE,
        "task_ids": task_ids,
        "reason": EvictionReason.PREEMPTED_BY_HP,
        "grace_seconds": grace,
        "issued_at": datetime.now(UTC),
    }
    return sign(EvictCommand(**(fields | changes)), key=KEY)


@dataclass
class AgentHarness:
    """One agent "process": its journal directory survives `restart()` like a real one's would."""

    state_dir: Path
    sink: RecordingSink
    agent: NodeAgent
    stop: asyncio.Event
    watcher: asyncio.Task[None]

    async def send(self, command: BindCommand | EvictCommand) -> None:
        """What the reader does per record: handle, then flush the journal (before its commit)."""
        await self.agent.handle(wrap(command, producer="test"), received_at=datetime.now(UTC))
        self.agent.journal.flush()

    async def until(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not predicate():
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"timed out; sent so far: {[e.event_type for _, e in self.sink.sent]}")
            await asyncio.sleep(0.02)

    async def crash(self) -> None:
        """Stop like kill -9 would: no cleanup, workers keep running."""
        self.stop.set()
        for task in [self.watcher, *self.agent.evictions.values()]:
            task.cancel()
        await asyncio.gather(self.watcher, *self.agent.evictions.values(), return_exceptions=True)


def agent_guard() -> CommandGuard:
    """The test agent's guard: NODE's commands signed with KEY, five minutes fresh."""
    return CommandGuard(node=NODE, key=KEY, max_age=timedelta(minutes=5), clock_skew=timedelta(seconds=30))


def worker_env() -> dict[str, str]:
    """The test workers' environment: this one, with the checkout importable (fake-task)."""
    return {**os.environ, "PYTHONPATH": str(REPO)}


def start_agent(
    state_dir: Path,
    sink: RecordingSink | None = None,
    guard: CommandGuard | None = None,
    **agent_options: Any,
) -> AgentHarness:
    """`agent_options` go to NodeAgent as they are (a sim clock, a checkpoint root, a worker
    environment...); `guard` (default `agent_guard()`) decides which commands it accepts."""
    sink = sink or RecordingSink()
    journal = Journal.open(state_dir / "journal.json", node=NODE)
    guard = guard or agent_guard()
    options: dict[str, Any] = {"watch_s": 0.02, "kill_wait_s": 5.0, "worker_env": worker_env()}
    agent = NodeAgent(
        node=NODE,
        backend=FakeGpuBackend("TEST-GPU", 4),
        gpu_model="TEST-GPU",
        journal=journal,
        guard=guard,
        sink=sink,
        metrics=AgentMetrics.create(configure_metrics("test").meter("test")),
        log_dir=state_dir / "logs",
        **(options | agent_options),
    )
    stop = asyncio.Event()
    return AgentHarness(state_dir, sink, agent, stop, asyncio.create_task(agent.watch(stop)))


@pytest_asyncio.fixture
async def harness(tmp_path: Path) -> AsyncIterator[AgentHarness]:
    h = start_agent(tmp_path / "agent")
    try:
        yield h
    finally:
        await h.crash()
        _kill_leftovers(h.agent.journal)


def _kill_leftovers(journal: Journal) -> None:
    for worker in journal.state.workers.values():
        if worker.pid is not None and worker.start_ticks is not None:
            procs.signal_group(worker.pid, worker.start_ticks, signal.SIGKILL)


@pytest.fixture
def kill_leftovers() -> Callable[[Journal], None]:
    return _kill_leftovers
