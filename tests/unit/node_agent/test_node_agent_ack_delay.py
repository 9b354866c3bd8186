"""The agent's ack-delay knob (services/node_agent/ack_delay.py): acks late by at most the maximum,
one topic's records in order, different topics free to swap, telemetry never held back, the same
delays for the same seed and node, and nothing left behind at close."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from gfs.schemas.commands import EvictAck, EvictOutcome
from gfs.schemas.envelope import Envelope, wrap
from gfs.schemas.telemetry import GpuSample, NodeTelemetry
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.node_agent.ack_delay import DelayedSink

NODE = "node-d"


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Envelope[Any], float]] = []

    async def send(self, topic_name: str, envelope: Envelope[Any]) -> object:
        self.sent.append((topic_name, envelope, time.monotonic()))
        return None


def _started(i: int) -> Envelope[Any]:
    now = datetime.now(UTC)
    return wrap(
        WorkerStarted(
            command_id=uuid.uuid4(), node=NODE, task_id=f"t{i}", worker_index=0, pid=100 + i, started_at=now
        ),
        producer="test",
    )


def _exited(i: int) -> Envelope[Any]:
    now = datetime.now(UTC)
    return wrap(
        WorkerExited(
            command_id=uuid.uuid4(), node=NODE, task_id=f"t{i}", worker_index=0, exit_code=0, exited_at=now
        ),
        producer="test",
    )


def _ack(i: int) -> Envelope[Any]:
    now = datetime.now(UTC)
    return wrap(
        EvictAck(
            command_id=uuid.uuid4(),
            node=NODE,
            task_ids=(f"t{i}",),
            outcome=EvictOutcome.NOT_RUNNING,
            acked_at=now,
        ),
        producer="test",
    )


async def test_acks_are_late_by_at_most_the_maximum_and_keep_their_topics_order() -> None:
    inner = Recorder()
    sink = DelayedSink(inner, max_delay_s=0.08, seed=3, node=NODE)
    sent_at: dict[str, float] = {}
    order: dict[str, list[str]] = {"gfs.commands.worker-ack": [], "gfs.commands.evict-ack": []}
    for i in range(40):
        for topic_name, envelope in (
            ("gfs.commands.worker-ack", _started(i) if i % 2 else _exited(i)),
            ("gfs.commands.evict-ack", _ack(i)),
        ):
            sent_at[str(envelope.event_id)] = time.monotonic()
            order[topic_name].append(str(envelope.event_id))
            assert await sink.send(topic_name, envelope) is None  # returns before publishing
        await asyncio.sleep(0.002)
    deadline = time.monotonic() + 2.0
    while len(inner.sent) < 80 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    await sink.close()
    assert len(inner.sent) == 80
    for topic_name, ids in order.items():
        assert [str(e.event_id) for t, e, _ in inner.sent if t == topic_name] == ids
    lateness = [at - sent_at[str(e.event_id)] for _, e, at in inner.sent]
    assert max(lateness) < 0.08 + 0.05  # the maximum, plus the event loop's slack
    # Different topics are free to swap: the merged order is not the order the agent sent in.
    merged_sent = sorted(sent_at, key=sent_at.__getitem__)
    assert [str(e.event_id) for _, e, _ in inner.sent] != merged_sent


async def test_telemetry_is_never_held_back() -> None:
    inner = Recorder()
    sink = DelayedSink(inner, max_delay_s=5.0, seed=1, node=NODE)
    await sink.send("gfs.commands.worker-ack", _started(1))
    gpu = GpuSample(index=0, utilisation_pct=0, memory_used_mib=0, memory_total_mib=80_000)
    beat = wrap(
        NodeTelemetry(node=NODE, gpu_model="G", sampled_at=datetime.now(UTC), gpus=(gpu,)), producer="test"
    )
    await sink.send("gfs.nodes.telemetry", beat)
    assert [t for t, _, _ in inner.sent] == ["gfs.nodes.telemetry"]
    await sink.close()  # the held WorkerStarted goes out at close, without the rest of its delay
    assert [t for t, _, _ in inner.sent] == ["gfs.nodes.telemetry", "gfs.commands.worker-ack"]


async def test_the_same_seed_and_node_draw_the_same_delays() -> None:
    async def draws(seed: int, node: str) -> list[float]:
        sink = DelayedSink(Recorder(), max_delay_s=1.0, seed=seed, node=node)
        for i in range(5):
            await sink.send("gfs.commands.evict-ack", _ack(i))
        await sink.close()
        return sink.delays

    first = await draws(7, "a")
    assert first == await draws(7, "a")
    assert first != await draws(7, "b")
    assert first != await draws(8, "a")
    assert all(0.0 <= d <= 1.0 for d in first)


def test_a_zero_maximum_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        DelayedSink(Recorder(), max_delay_s=0.0, seed=0, node=NODE)
