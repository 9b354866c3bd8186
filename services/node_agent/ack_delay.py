"""Randomly delayed acknowledgements: a test and benchmark knob, off by default (issue 22).

The races the attempt state machine settles (docs/attempts.md) depend on when the service reads an
agent's WorkerStarted, WorkerExited and EvictAck relative to each other and to its own commands.
On one quiet machine those arrive within milliseconds, so the races are rare; a real cluster's
agents answer late by network hops, busy hosts and broker batching. With
`AGENT_ACK_DELAY_MAX_S` > 0 each ack the agent publishes waits a random time, uniform in
[0, max] and drawn from a generator seeded with `AGENT_ACK_DELAY_SEED` and the node name (so a run
is repeatable per node), before it goes to the broker. `gfs livebench races` drives the live
pipeline with it.

What it keeps: the order of one topic's records (a record is never released before the one sent
before it on that topic: Kafka keeps one producer's records of a partition in order, and the agent
relies on a WorkerExited never overtaking its WorkerStarted). What it changes: records of
different topics (an EvictAck and the WorkerExited of the same worker) may reach the service in
either order, and every ack reaches it up to `max` later than the agent decided it. Telemetry is
never delayed (a heartbeat held back would only make nodes look silent).

What it costs: `send` returns before the record is on the broker, so an ack the agent journals as
published is lost if the agent dies within `max` seconds: never use it outside tests and benches.
`close()` publishes what is still waiting, without the rest of its delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from gfs.schemas.envelope import Envelope
from gfs.schemas.topics import EVICT_ACK_TOPIC, WORKER_ACK_TOPIC

log = logging.getLogger(__name__)

# The topics whose records are acknowledgements (the ones delayed).
DELAYED_TOPICS = frozenset({WORKER_ACK_TOPIC, EVICT_ACK_TOPIC})


class Sink(Protocol):
    async def send(self, topic_name: str, envelope: Envelope[Any]) -> object: ...


@dataclass(slots=True)
class _Lane:
    """One topic's queue: records in send order, each with the time it may go."""

    queue: asyncio.Queue[tuple[float, Envelope[Any]]] = field(default_factory=asyncio.Queue)
    last_release: float = 0.0
    worker: asyncio.Task[None] | None = None
    current: Envelope[Any] | None = None  # taken from the queue, not yet on the broker


class DelayedSink:
    """Wraps the agent's sink (the EnvelopeProducer); see the module doc."""

    def __init__(
        self,
        inner: Sink,
        *,
        max_delay_s: float,
        seed: int,
        node: str,
        clock: Any = time.monotonic,
    ) -> None:
        if max_delay_s <= 0:
            raise ValueError("max_delay_s must be positive (0 means: do not wrap the sink)")
        self.inner = inner
        self.max_delay_s = max_delay_s
        self.rng = random.Random(f"{seed}/{node}")
        self.clock = clock
        self.lanes: dict[str, _Lane] = {}
        self.delays: list[float] = []  # what each delayed record waited on top of the ones before it
        self.failures = 0

    async def send(self, topic_name: str, envelope: Envelope[Any]) -> object:
        if topic_name not in DELAYED_TOPICS:
            return await self.inner.send(topic_name, envelope)
        lane = self.lanes.get(topic_name)
        if lane is None:
            lane = self.lanes[topic_name] = _Lane()
            lane.worker = asyncio.create_task(self._drain(topic_name, lane), name=f"ack-delay-{topic_name}")
        drawn = self.rng.uniform(0.0, self.max_delay_s)
        # Never before the previous record of the topic: the per-topic order is kept, and since
        # that one was due at most `max` after it was sent, so is this one.
        release = max(lane.last_release, self.clock() + drawn)
        lane.last_release = release
        self.delays.append(drawn)
        await lane.queue.put((release, envelope))
        return None

    async def _drain(self, topic_name: str, lane: _Lane) -> None:
        while True:
            release, envelope = await lane.queue.get()
            lane.current = envelope
            wait = release - self.clock()
            if wait > 0:
                await asyncio.sleep(wait)
            await self._send(topic_name, envelope)
            lane.current = None

    async def _send(self, topic_name: str, envelope: Envelope[Any]) -> None:
        # Retried: the agent already counts this ack as published (module doc); a broker hiccup
        # must not drop it silently.
        for attempt in range(5):
            try:
                await self.inner.send(topic_name, envelope)
                return
            except Exception as exc:
                log.warning("delayed %s not published (try %d): %r", topic_name, attempt + 1, exc)
                await asyncio.sleep(0.2 * 2**attempt)
        self.failures += 1
        log.error("delayed %s dropped after 5 tries", topic_name)

    async def close(self) -> None:
        """Publish what is still waiting (at once), then stop the lanes."""
        for topic_name, lane in self.lanes.items():
            if lane.worker is not None:
                lane.worker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await lane.worker
            if lane.current is not None:  # cut short (a duplicate ack, if it was on its way, is harmless)
                await self._send(topic_name, lane.current)
                lane.current = None
            while not lane.queue.empty():
                _, envelope = lane.queue.get_nowait()
                await self._send(topic_name, envelope)
