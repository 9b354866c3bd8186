"""What `gfs livebench races` (services/livebench/races/bench.py) reads for its check (races/check.py): the
run's records on the task and command topics, filtered by key before decoding; the agents'
journals, merged from snapshots; kept in the run's folder so `recheck` can check them again; and
the workers still alive when the agents stopped."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from gfs.schemas.tasks import TaskAccepted, TaskFinished, TaskRejected
from gfs.schemas.topics import (
    BIND_TOPIC,
    EVICT_ACK_TOPIC,
    EVICT_TOPIC,
    TASK_LIFECYCLE_TOPIC,
    WORKER_ACK_TOPIC,
    decode,
    topic,
)
from gfs.services.livebench.races.check import RaceReport, Seen, check
from gfs.services.node_agent.journal import CommandEntry, JournalState, WorkerEntry

READ_TOPICS = (
    TASK_LIFECYCLE_TOPIC,
    BIND_TOPIC,
    EVICT_TOPIC,
    WORKER_ACK_TOPIC,
    EVICT_ACK_TOPIC,
)


class _Reader:
    """The run's records on READ_TOPICS from their end at `start()` on, filtered by key before
    decoding (the shared broker carries other runs' traffic)."""

    def __init__(self, servers: list[str], task_prefix: str, nodes: set[str]) -> None:
        self.consumer = AIOKafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
        self.task_prefix = task_prefix.encode()
        self.nodes = {n.encode() for n in nodes}
        self.records: list[Seen] = []
        self.finished: set[str] = set()
        self.accepted: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.consumer.start()
        parts = [TopicPartition(t, p) for t in READ_TOPICS for p in range(topic(t).partitions)]
        self.consumer.assign(parts)
        await self.consumer.seek_to_end(*parts)
        for tp in parts:  # resolve the end offsets now, before anything of the run is published
            await self.consumer.position(tp)
        self._task = asyncio.create_task(self._run())

    def _mine(self, topic_name: str, key: bytes) -> bool:
        if topic_name == TASK_LIFECYCLE_TOPIC:
            return key.startswith(self.task_prefix)
        return key in self.nodes

    async def _run(self) -> None:
        while True:
            batch = await self.consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for r in records:
                    if not self._mine(r.topic, r.key or b""):
                        continue
                    with contextlib.suppress(ValueError):
                        envelope = decode(r.topic, r.value or b"")
                        self.records.append(
                            Seen(r.topic, r.timestamp, envelope.occurred_at, envelope.payload)
                        )
                        if isinstance(envelope.payload, TaskFinished | TaskRejected):
                            self.finished.add(envelope.payload.task_id)
                        elif isinstance(envelope.payload, TaskAccepted):
                            self.accepted.add(envelope.payload.task_id)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self.consumer.stop()


class _Journals:
    """Snapshots of the agents' journals merged by entry (an agent prunes entries after its
    freshness window; a snapshot every few seconds sees each one in its final state)."""

    def __init__(self, paths: dict[str, Path]) -> None:
        self.paths = paths
        self.workers: dict[str, dict[str, WorkerEntry]] = {n: {} for n in paths}
        self.commands: dict[str, dict[str, CommandEntry]] = {n: {} for n in paths}
        self.snapshots = 0

    def snapshot(self) -> None:
        for node, path in self.paths.items():
            with contextlib.suppress(OSError, ValueError):
                state = JournalState.model_validate_json(path.read_bytes())
                self.workers[node].update(state.workers)
                self.commands[node].update(state.commands)
        self.snapshots += 1


def _keep(workdir: Path, records: list[Seen], journals: _Journals) -> None:
    """What the check read, for a second look: records.jsonl and the merged journals."""
    with (workdir / "records.jsonl").open("w") as out:
        for r in records:
            line = {
                "topic": r.topic,
                "timestamp_ms": r.timestamp_ms,
                "occurred_at": r.occurred_at.isoformat(),
                "type": type(r.payload).__name__,
                "payload": r.payload.model_dump(mode="json"),
            }
            out.write(json.dumps(line) + "\n")
    merged = {
        node: {"workers": {k: w.model_dump(mode="json") for k, w in journals.workers[node].items()},
               "commands": {k: c.model_dump(mode="json") for k, c in journals.commands[node].items()}}
        for node in journals.paths
    }  # fmt: skip
    (workdir / "journals.json").write_text(json.dumps(merged))


def recheck(workdir: Path) -> tuple[RaceReport, dict[str, Any]]:
    """The check again on what a run kept (records.jsonl, journals.json, report.json)."""
    records: list[Seen] = []
    with (workdir / "records.jsonl").open() as kept:
        for line in kept:
            r = json.loads(line)
            payload = topic(r["topic"]).payload_type(r["type"]).model_validate(r["payload"])
            occurred = datetime.fromisoformat(r["occurred_at"])
            records.append(Seen(r["topic"], r["timestamp_ms"], occurred, payload))
    merged = json.loads((workdir / "journals.json").read_text())
    workers = {n: [WorkerEntry.model_validate(w) for w in v["workers"].values()] for n, v in merged.items()}
    commands = {
        n: [CommandEntry.model_validate(c) for c in v["commands"].values()] for n, v in merged.items()
    }
    numbers: dict[str, Any] = json.loads((workdir / "report.json").read_text())["numbers"]
    end = datetime.fromtimestamp(max((r.timestamp_ms for r in records), default=0) / 1000 + 1, UTC)
    return check(records, workers, commands, end=end), numbers


def _kill_workers(journals: _Journals) -> None:
    """Workers still alive when the agents stopped (none after a settled run)."""
    journals.snapshot()
    for entries in journals.workers.values():
        for w in entries.values():
            if w.pid is None or w.exited_at is not None or w.start_ticks is None:
                continue
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{w.pid}/stat").read_text().rsplit(")", 1)[1].split()
                if int(stat[19]) == w.start_ticks:
                    os.killpg(w.pid, signal.SIGKILL)
