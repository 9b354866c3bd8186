"""Read the live log `gfs whatif` rebuilds from: the task topics and the nodes' telemetry.

One consumer without a group (it commits nothing and disturbs no service), assigned to every
partition, seeks each to the first record the broker wrote at or after `since` (the broker's
record timestamp, wall-clock time: `--since 7d` means the last seven days of the log as written,
whatever clock the events carry) and reads up to the ends it saw at the start. Records that do
not decode are counted and skipped (the services dead-letter them; they are not ours to judge),
duplicates (the same envelope event_id, at-least-once delivery) read once.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from gfs.schemas.topics import TASK_LIFECYCLE_TOPIC, TASK_SUBMIT_TOPIC, TELEMETRY_TOPIC, decode, topic

LOG_TOPICS = (TASK_SUBMIT_TOPIC, TASK_LIFECYCLE_TOPIC, TELEMETRY_TOPIC)
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def parse_since(text: str) -> float:
    """`7d`, `12h`, `30m`, `90s`, `2w` (or a plain number of seconds) as seconds."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if found is None or float(found.group(1)) <= 0:
        raise ValueError(f"--since {text!r}: expected a positive duration like 7d, 12h, 30m or 90s")
    return float(found.group(1)) * _UNITS[found.group(2) or "s"]


@dataclass(frozen=True, slots=True)
class LogRecord:
    topic: str
    written_ms: int  # the broker's record timestamp
    occurred_s: float  # the envelope's occurred_at (the event's own clock), epoch seconds
    payload: Any
    event_id: uuid.UUID | None = None


@dataclass(slots=True)
class Log:
    records: list[LogRecord] = field(default_factory=list)
    undecodable: int = 0
    duplicates: int = 0
    before_since: int = 0


def keep_since(records: Iterable[LogRecord], since_ms: int, log: Log) -> Log:
    """The records written at or after `since_ms`, each event once, in the order given."""
    seen: set[uuid.UUID] = set()
    for record in records:
        if record.written_ms < since_ms:
            log.before_since += 1
        elif record.event_id is not None and record.event_id in seen:
            log.duplicates += 1
        else:
            if record.event_id is not None:
                seen.add(record.event_id)
            log.records.append(record)
    return log


async def read_log(
    bootstrap_servers: Sequence[str],
    since_s: float,
    now_s: float | None = None,
    topics: Sequence[str] = LOG_TOPICS,
) -> Log:
    """Everything on `topics` written in the last `since_s` seconds (before `now_s`, default now)."""
    since_ms = int(((time.time() if now_s is None else now_s) - since_s) * 1000)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=list(bootstrap_servers), enable_auto_commit=False, isolation_level="read_committed"
    )
    await consumer.start()
    raw: list[LogRecord] = []
    log = Log()
    try:
        parts = [TopicPartition(t, p) for t in topics for p in range(topic(t).partitions)]
        consumer.assign(parts)
        ends = await consumer.end_offsets(parts)
        starts = await consumer.offsets_for_times({tp: since_ms for tp in parts})
        todo = {}
        for tp in parts:
            found = starts.get(tp)
            if found is not None and found.offset < ends[tp]:
                consumer.seek(tp, found.offset)
                todo[tp] = ends[tp]
        telemetry_seen: set[bytes] = set()
        while todo:
            batch = await consumer.getmany(*todo, timeout_ms=500, max_records=5000)
            for tp, records in batch.items():
                for record in records:
                    if record.offset >= todo.get(tp, -1):
                        continue
                    if tp.topic == TELEMETRY_TOPIC:
                        # Only a node's first sample is needed (its pool and GPU count): the rest
                        # of its heartbeats are not decoded.
                        if record.key is not None and record.key in telemetry_seen:
                            continue
                        if record.key is not None:
                            telemetry_seen.add(record.key)
                    try:
                        envelope = decode(tp.topic, record.value or b"")
                    except ValueError:
                        log.undecodable += 1
                        continue
                    raw.append(
                        LogRecord(tp.topic, record.timestamp, envelope.occurred_at.timestamp(),
                                  envelope.payload, envelope.event_id)
                    )  # fmt: skip
            for tp in list(todo):
                if await consumer.position(tp) >= todo[tp]:
                    del todo[tp]
    finally:
        await consumer.stop()
    raw.sort(key=lambda r: r.written_ms)  # one order across partitions (stable within one)
    return keep_since(raw, since_ms, log)
