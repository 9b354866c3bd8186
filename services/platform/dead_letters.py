"""Reading and replaying dead letters: which letters a filter selects, and what replaying one does.

Pure (no Kafka): `gfs.services.platform.deadletter_cli` reads `gfs.deadletter` and publishes; the rules
live here so they are unit-tested without a broker.

Replay rules, in the order they are checked:
- a **truncated** letter is never replayed: it holds only the first bytes of the record (find the
  original at `source_topic`/`source_partition`/`source_offset` while that topic retains it);
- the original must **decode now** with the registry (`gfs.schemas.topics.decode`) for its source
  topic: a record that is still invalid would only be dead-lettered again, so it is reported with
  today's reason instead ("fix the cause first");
- a replayed record is the original value byte for byte (so its `event_id` is unchanged: consumers
  that de-duplicate on it, such as the preemption service's journal and the quota service's
  period outcomes, apply it at most once however often it is replayed), keyed as the registry keys
  it, with a `gfs-replayed-from` header naming the letter.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from gfs.schemas.dead_letter import DeadLetter
from gfs.schemas.topics import DEAD_LETTER_TOPIC, decode, key_of
from gfs.services.platform.kafka.dead_letter import describe_error

REPLAY_HEADER = "gfs-replayed-from"


@dataclass(frozen=True, slots=True)
class Letter:
    """One record of gfs.deadletter, with where it lies there."""

    partition: int
    offset: int
    letter: DeadLetter

    @property
    def ref(self) -> str:
        return f"{DEAD_LETTER_TOPIC}/{self.partition}/{self.offset}"

    def original(self) -> bytes:
        return base64.b64decode(self.letter.original)


@dataclass(frozen=True, slots=True, kw_only=True)
class Selection:
    """Which letters a command acts on; every given criterion must hold (empty: no criterion)."""

    offsets: frozenset[int] = frozenset()
    topic: str | None = None
    reason: str | None = None  # case-insensitive substring of the letter's error
    since: datetime | None = None
    until: datetime | None = None

    @property
    def empty(self) -> bool:
        return (
            not self.offsets
            and self.topic is None
            and self.reason is None
            and self.since is None
            and self.until is None
        )

    def matches(self, item: Letter) -> bool:
        letter = item.letter
        if self.offsets and item.offset not in self.offsets:
            return False
        if self.topic is not None and letter.source_topic != self.topic:
            return False
        if self.reason is not None and self.reason.lower() not in letter.error.lower():
            return False
        if self.since is not None and letter.failed_at < self.since:
            return False
        return self.until is None or letter.failed_at < self.until


class Verdict(StrEnum):
    REPLAY = "replay"
    TRUNCATED = "truncated"
    STILL_INVALID = "still_invalid"
    CORRUPT = "corrupt"  # the kept bytes do not match the letter's own hash


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    """What replaying `item` does: publish `value` under `key` to `topic`, or why not."""

    item: Letter
    verdict: Verdict
    detail: str
    topic: str
    key: bytes | None = None
    value: bytes | None = None

    @property
    def headers(self) -> list[tuple[str, bytes]]:
        return [(REPLAY_HEADER, self.item.ref.encode())]


def plan_replay(item: Letter) -> ReplayPlan:
    """Whether `item` can be replayed now, and as what (never raises for a bad letter)."""
    letter = item.letter
    topic = letter.source_topic
    if letter.truncated:
        where = f"{topic}/{letter.source_partition}/{letter.source_offset}"
        return ReplayPlan(
            item, Verdict.TRUNCATED, f"only the first bytes were kept; the original is at {where}", topic
        )
    value = item.original()
    if letter.original_sha256 is not None and hashlib.sha256(value).hexdigest() != letter.original_sha256:
        return ReplayPlan(item, Verdict.CORRUPT, "the kept bytes do not match original_sha256", topic)
    try:
        envelope = decode(topic, value)
    except (ValueError, KeyError) as exc:  # ValidationError and JSON errors are ValueErrors
        return ReplayPlan(item, Verdict.STILL_INVALID, f"still invalid: {describe_error(exc)}", topic)
    return ReplayPlan(
        item,
        Verdict.REPLAY,
        f"{envelope.event_type} event {envelope.event_id}",
        topic,
        key_of(envelope),
        value,
    )


def summary_row(item: Letter) -> dict[str, object]:
    """One letter as plain data (the `list` command's JSON and table rows)."""
    letter = item.letter
    return {
        "offset": item.offset,
        "failed_at": letter.failed_at.isoformat(),
        "source": f"{letter.source_topic}/{letter.source_partition}/{letter.source_offset}",
        "consumer_group": letter.consumer_group,
        "size": letter.original_size,
        "truncated": letter.truncated,
        "error": letter.error,
    }
