"""Helpers for tests of the live services: a tap on topics from "now", and a service process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from schemas.envelope import Envelope
from schemas.topics import decode, topic

REPO = Path(__file__).resolve().parents[2]


class Tap:
    """Reads `topics` from their end at `start()` on, decoding every record (filtering is the
    test's business). Manual assignment: no consumer group, nothing committed."""

    def __init__(self, bootstrap: str, topics: Sequence[str]) -> None:
        self.bootstrap = bootstrap
        self.topics = list(topics)
        self.items: list[tuple[str, Envelope[Any], list[tuple[str, bytes]]]] = []
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
                    with contextlib.suppress(ValueError):
                        self.items.append((r.topic, decode(r.topic, r.value or b""), list(r.headers or ())))

    def payloads(
        self, kind: type | tuple[type, ...], where: Callable[[Any], bool] = lambda _: True
    ) -> list[Any]:
        return [e.payload for _, e, _ in self.items if isinstance(e.payload, kind) and where(e.payload)]

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

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()


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
            [sys.executable, "-m", "services", *self.args], cwd=REPO, env=self.env, stdout=handle,
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
