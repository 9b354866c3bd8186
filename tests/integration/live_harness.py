"""Helpers for tests of the live services: a tap on topics from "now" (with the producer the test
publishes through), work run in the background for the length of a block, and a service process."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from aiokafka import AIOKafkaConsumer, TopicPartition

from gfs.schemas.envelope import Envelope
from gfs.schemas.topics import decode, topic
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.toolkit.consumer_groups import start_groups_at_end

REPO = Path(__file__).resolve().parents[2]


class TapRecord(NamedTuple):
    """A record a tap decoded, with where it stands in the log and its Kafka key."""

    envelope: Envelope[Any]
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    headers: list[tuple[str, bytes]]


class Tap:
    """Reads `topics` from their end at `start()` on, decoding every record (filtering is the
    test's business). Manual assignment: no consumer group, nothing committed. `items` holds
    (topic, envelope, headers) in arrival order (a test may clear it); `records`, the same records
    with their key and place in the log."""

    def __init__(self, bootstrap: str, topics: Sequence[str]) -> None:
        self.bootstrap = bootstrap
        self.topics = list(topics)
        # Which payloads are the test's (None: all). The topics are shared with the tests running
        # beside it, which may use the same task ids ("A", "H"): a test in one pool sets this.
        self.keep: Callable[[Any], bool] | None = None
        self.items: list[tuple[str, Envelope[Any], list[tuple[str, bytes]]]] = []
        self.records: list[TapRecord] = []
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> Tap:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        await consumer.start()
        partitions = [TopicPartition(t, p) for t in self.topics for p in range(topic(t).partitions)]
        consumer.assign(partitions)
        await consumer.seek_to_end(*partitions)
        for tp in partitions:  # resolve the end offsets now, before anything is published
            await consumer.position(tp)
        self._consumer = consumer
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        assert self._consumer is not None
        while True:
            batch = await self._consumer.getmany(timeout_ms=100)
            for records in batch.values():
                for r in records:
                    try:
                        envelope = decode(r.topic, r.value or b"")
                    except ValueError:
                        continue
                    if self.keep is not None and not self.keep(envelope.payload):
                        continue
                    headers = list(r.headers or ())
                    self.items.append((r.topic, envelope, headers))
                    place = (r.topic, r.partition, r.offset, r.timestamp, r.key)
                    self.records.append(TapRecord(envelope, *place, headers))

    def payloads(
        self, kind: type | tuple[type, ...], where: Callable[[Any], bool] = lambda _: True
    ) -> list[Any]:
        return [e.payload for _, e, _ in self.items if isinstance(e.payload, kind) and where(e.payload)]

    def once(self, kind: type) -> list[Any]:
        """The payloads of `kind`, one per event id: the outbox publishes at least once, so a record
        published again (same event id) counts once."""
        seen = {e.event_id: e.payload for _, e, _ in self.items if isinstance(e.payload, kind)}
        return list(seen.values())

    async def wait(
        self,
        kind: type | tuple[type, ...],
        where: Callable[[Any], bool] = lambda _: True,
        *,
        count: int = 1,
        timeout: float = 30.0,
    ) -> list[Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.payloads(kind, where)
            if len(found) >= count:
                return found
            await asyncio.sleep(0.05)
        kinds = sorted({type(e.payload).__name__ for _, e, _ in self.items})
        raise AssertionError(
            f"timed out waiting for {count} x {kind}: saw {len(self.items)} records ({kinds})"
        )

    async def end_offset(self, topic_name: str, partition: int) -> int:
        """Where `topic_name`'s `partition` ends now (the next offset to be written)."""
        assert self._consumer is not None
        tp = TopicPartition(topic_name, partition)
        return int((await self._consumer.end_offsets([tp]))[tp])

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()


@contextlib.asynccontextmanager
async def tap_and_producer(
    bootstrap: str, tapped: Sequence[str], client_id: str
) -> AsyncIterator[tuple[Tap, EnvelopeProducer]]:
    """A tap on `tapped` started before anything is published, and the producer the test publishes
    through; the tap is stopped before the producer closes."""
    tap = await Tap(bootstrap, tapped).start()
    async with EnvelopeProducer(bootstrap_servers=bootstrap, client_id=client_id) as producer:
        try:
            yield tap, producer
        finally:
            await tap.stop()


@contextlib.asynccontextmanager
async def in_background(work: Coroutine[Any, Any, None]) -> AsyncIterator[asyncio.Task[None]]:
    """`work` runs as a task for the length of the block (heartbeats, a reader's pump, agents that
    ack), and is cancelled after it."""
    task = asyncio.create_task(work)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class ServiceProcess:
    """A `gfs ...` command as a child process in its own process group (so kill -9 takes it
    and everything it started)."""

    def __init__(self, args: Sequence[str], env: dict[str, str], log: Path) -> None:
        self.args = list(args)
        self.env = env
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ServiceProcess:
        handle = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gfs.services", *self.args], cwd=REPO, env=self.env, stdout=handle,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        handle.close()
        return self

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9()

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def groups_from_the_end(bootstrap: str, groups: Mapping[str, Sequence[str]]) -> None:
    """Each new consumer group of a service about to start commits its topics' current ends, so
    the service reads only what its test publishes from now on: not the shared topics' history of
    every test before it (minutes of decoding by the end of a CI run), nor what the tests beside it
    published before. From sync code that may run inside the test's event loop: its own thread and
    loop."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, start_groups_at_end(bootstrap, groups)).result()
