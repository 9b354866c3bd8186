"""The node agent on the real broker, with the test in the preemption service's seat
(test_node_agent.py, test_node_agent_clock.py, and the agent's part of test_attempts_live.py and
test_reconcile_live.py): commands built and signed as the service signs them and published with a
trace context, the agent run in-process until it is ready and stopped after, its leftover workers
killed, and what each node published (`Acks`, read off one tap by the node's Kafka key)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest_asyncio
from live_harness import Tap

from gfs.schemas.commands import BindCommand, EvictCommand
from gfs.schemas.envelope import wrap
from gfs.schemas.tasks import EvictionReason, Placement, TaskClass
from gfs.services.node_agent import procs
from gfs.services.node_agent.service import AgentOptions, run_node_agent
from gfs.services.node_agent.settings import NodeAgentSettings
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.platform.signing import node_key, sign

SECRET = "integration-master-secret-" + "x" * 16
WAIT_S = 30.0
ACK_TOPICS = ("gfs.commands.worker-ack", "gfs.commands.evict-ack", "gfs.nodes.telemetry")
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


def _node(prefix: str = "it-node") -> str:
    """A node name of its own: its own partition key and consumer group."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _fake_task(*args: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "gfs.services.node_agent.fake_task", *args)


def _bind(node: str, task_id: str, *args: str, gpus: tuple[int, ...] = (0,), **changes: Any) -> BindCommand:
    fields: dict[str, Any] = {
        "command_id": uuid.uuid4(),
        "node": node,
        "task_id": task_id,
        "task_class": TaskClass.SPOT,
        "placements": (Placement(worker_index=0, node=node, gpu_indices=gpus),),
        "command": _fake_task(*args),
        "issued_at": datetime.now(UTC),
    }
    return BindCommand(**(fields | changes))


def _evict(node: str, *task_ids: str, grace: float = 2.0, **changes: Any) -> EvictCommand:
    fields: dict[str, Any] = {
        "command_id": uuid.uuid4(),
        "node": node,
        "task_ids": task_ids,
        "reason": EvictionReason.PREEMPTED_BY_HP,
        "grace_seconds": grace,
        "issued_at": datetime.now(UTC),
    }
    return EvictCommand(**(fields | changes))


def _signed(command: Any, node: str, master: str = SECRET) -> Any:
    return sign(command, key=node_key(master.encode(), node))


async def _publish(producer: EnvelopeProducer, command: BindCommand | EvictCommand) -> None:
    topic = "gfs.commands.bind" if isinstance(command, BindCommand) else "gfs.commands.evict"
    await producer.send(topic, wrap(command, producer="it"), headers=[("traceparent", TRACEPARENT.encode())])


class Acks:
    """Everything the agent of `node` published on the ack and telemetry topics (the records `tap`
    read under the node's key), with headers."""

    def __init__(self, node: str, tap: Tap) -> None:
        self.node = node
        self.tap = tap

    @property
    def records(self) -> list[tuple[Any, dict[str, bytes]]]:
        key = self.node.encode()
        return [(r.envelope, dict(r.headers)) for r in self.tap.records if r.key == key]

    def of(self, kind: type[Any]) -> list[Any]:
        return [env.payload for env, _ in self.records if isinstance(env.payload, kind)]

    def headers_of(self, kind: type[Any]) -> list[dict[str, bytes]]:
        return [headers for env, headers in self.records if isinstance(env.payload, kind)]

    async def until(self, predicate: Callable[[Acks], bool], what: str, timeout: float = WAIT_S) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self):
            if time.monotonic() > deadline:
                seen = [(type(env.payload).__name__) for env, _ in self.records]
                raise AssertionError(f"timed out waiting for {what}; seen: {seen}")
            await asyncio.sleep(0.05)


@pytest_asyncio.fixture(loop_scope="session")
async def ack_reader(
    kafka_bootstrap: str, registry_topics: TopicsReport
) -> AsyncIterator[Callable[[str], Acks]]:
    """Reads the ack topics from their current end (no group); `watch(node)` gives a node's."""
    tap = await Tap(kafka_bootstrap, ACK_TOPICS).start()
    try:
        yield lambda node: Acks(node, tap)
    finally:
        await tap.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def publisher(kafka_bootstrap: str, registry_topics: TopicsReport) -> AsyncIterator[EnvelopeProducer]:
    async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
        yield producer


def _settings(kafka: str, tmp_path: Path, **changes: Any) -> NodeAgentSettings:
    values: dict[str, Any] = {
        "kafka_bootstrap_servers": kafka,
        "gfs_command_secret": SECRET,
        "agent_state_root": tmp_path,
        "agent_kill_wait_s": 5.0,
    }
    return NodeAgentSettings(**(values | changes))


@contextlib.asynccontextmanager
async def agent_in_process(
    settings: NodeAgentSettings, options: AgentOptions, wait_s: float = WAIT_S
) -> AsyncIterator[None]:
    """The project's node agent in-process, ready (its start-up error raised); stopping it leaves
    its workers running (as a partition or a crash of the agent would). `wait_s` bounds its start
    and its stop."""
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(run_node_agent(settings, options, stop, ready=ready))
    waiter = asyncio.create_task(ready.wait())
    await asyncio.wait([task, waiter], timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()  # raises the agent's start-up error
    assert ready.is_set(), "the agent did not become ready"
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, wait_s)


@contextlib.asynccontextmanager
async def _agent(kafka: str, tmp_path: Path, node: str, metrics_port: int = 0) -> AsyncIterator[Path]:
    """An in-process agent with 4 fake GPUs; yields its state dir. Its workers are killed after."""
    state_dir = tmp_path / node
    options = AgentOptions(
        node=node, gpu_model="IT-GPU", gpus=4, fake_gpus=True, telemetry_s=1.0, state_dir=state_dir,
        metrics_port=metrics_port,
    )  # fmt: skip
    try:
        async with agent_in_process(_settings(kafka, tmp_path), options):
            yield state_dir
    finally:
        _kill_workers(state_dir)


def _journal(state_dir: Path) -> dict[str, Any]:
    return dict(json.loads((state_dir / "journal.json").read_text()))


def _kill_workers(state_dir: Path) -> None:
    """The workers the agent's journal lists as running, killed (agents leave them running)."""
    with contextlib.suppress(FileNotFoundError):
        for worker in _journal(state_dir)["workers"].values():
            if worker["pid"] and worker["start_ticks"] and worker["exited_at"] is None:
                procs.signal_group(worker["pid"], worker["start_ticks"], signal.SIGKILL)
