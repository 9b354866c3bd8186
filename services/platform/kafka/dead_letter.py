"""Dead-letter records: what a consumer publishes when a message cannot be decoded or handled.

No Kafka here, so the record and its human-readable reason are unit-tested without a broker.
`DeadLetterPublisher` is the one way every consumer dead-letters a record (the platform's consume
loop, the forecast stream, the node agent): build the letter from the consumed record, publish it
on `gfs.schemas.topics.DEAD_LETTER_TOPIC` through whatever sink the consumer has, and count it.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import ValidationError

from gfs.schemas.dead_letter import DeadLetter
from gfs.schemas.envelope import Envelope, wrap
from gfs.schemas.topics import DEAD_LETTER_TOPIC

# Longest reason kept in a dead letter: a ValidationError on a large payload can list hundreds
# of errors; the first few name the problem and the original bytes are kept for the rest.
MAX_REASON_CHARS = 2_000
_MAX_LISTED_ERRORS = 10
# Longest original value kept whole. Its base64 (4/3 larger) plus the envelope must stay under
# the broker's message limit (1 MiB by default): a larger record is kept truncated, with its
# size and SHA-256, so a poisoned giant never makes the dead-letter publish (and the consumer) fail.
MAX_ORIGINAL_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class FailedRecord:
    """Where the undecodable bytes came from (a consumed Kafka record, minus the broker types)."""

    topic: str
    partition: int
    offset: int
    value: bytes | None
    consumer_group: str


def describe_error(exc: BaseException) -> str:
    """A one-line reason that names the offending field or the JSON position.

    ValidationError -> "payload.gpu_request: Input should be greater than 0 (got -1)"; JSON errors
    keep line/column; anything else is `Type: message`.
    """
    if isinstance(exc, ValidationError):
        parts = []
        for error in exc.errors(include_url=False)[:_MAX_LISTED_ERRORS]:
            where = ".".join(str(part) for part in error.get("loc", ())) or "<root>"
            given = error.get("input")
            shown = "" if isinstance(given, dict | list) else f" (got {given!r})"
            parts.append(f"{where}: {error.get('msg', 'invalid')}{shown}")
        extra = exc.error_count() - len(parts)
        if extra > 0:
            parts.append(f"... and {extra} more")
        reason = f"validation failed: {'; '.join(parts)}"
    elif isinstance(exc, json.JSONDecodeError):
        reason = f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    elif isinstance(exc, UnicodeDecodeError):
        reason = f"not UTF-8 text: {exc.reason} at byte {exc.start}"
    else:
        reason = f"{type(exc).__name__}: {exc}"
    return reason[:MAX_REASON_CHARS]


# The decoder's own refusals (schemas/decoding.py) keep their kind as the code; any other field
# error is `invalid_payload`.
_DECODER_KINDS = frozenset(
    {"envelope_type", "missing_event_type", "unknown_event_type", "unsupported_schema_version"}
)


def reason_code(exc: BaseException) -> str:
    """The machine-readable code of `exc` for a dead letter's `reason`: the code an error names
    itself (a `reason_code` attribute: refusals, a record that failed to store), the decoder's
    kind, or one per family of decode failure; `failed` for anything else."""
    named = getattr(exc, "reason_code", None)
    if isinstance(named, str):
        return named
    if isinstance(exc, ValidationError):
        errors = exc.errors(include_url=False)
        kind = str(errors[0].get("type", "")) if errors else ""
        return kind if kind in _DECODER_KINDS else "invalid_payload"
    if isinstance(exc, json.JSONDecodeError):
        return "malformed_json"
    if isinstance(exc, UnicodeDecodeError):
        return "not_utf8"
    return "failed"


class Refused(ValueError):
    """A record that decoded but is refused, for a reason with a code (`reason_code`: the
    dead letter's `reason`; the message, its `error`)."""

    def __init__(self, reason_code: str, message: str) -> None:
        super().__init__(message)
        self.reason_code = reason_code


def build_dead_letter(
    record: FailedRecord, *, error: BaseException, failed_at: datetime, producer: str
) -> Envelope[DeadLetter]:
    """The dead-letter envelope for `record`: original bytes (base64), reason and coordinates.

    `failed_at` is an argument (not read from the clock here) so the record is deterministic.
    """
    value = record.value or b""
    kept = value[:MAX_ORIGINAL_BYTES]
    payload = DeadLetter(
        original=base64.b64encode(kept).decode("ascii"),
        original_size=len(value),
        original_sha256=hashlib.sha256(value).hexdigest(),
        truncated=len(kept) < len(value),
        error=describe_error(error),
        reason=reason_code(error),
        source_topic=record.topic,
        source_partition=record.partition,
        source_offset=record.offset,
        failed_at=failed_at,
        consumer_group=record.consumer_group,
    )
    return wrap(payload, producer=producer, occurred_at=failed_at)


class DeadLetterSink(Protocol):
    """Where letters go: `EnvelopeProducer`, or an adapter over another client (Faust's topic)."""

    async def send(self, topic_name: str, envelope: Envelope[Any]) -> object: ...


class ConsumedRecord(Protocol):
    """What a letter needs of the consumed record (aiokafka's `ConsumerRecord` has it)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def value(self) -> bytes | None: ...


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True, kw_only=True)
class DeadLetterPublisher:
    """Dead-letters records for one consumer group: build, publish, count. (The caller logs, in
    its own service's words: operators grep each service's line.)

    The publish is awaited (the broker's ack) before the caller goes on to commit the record's
    offset, so a letter is never lost to a crash in between (it may be published twice instead,
    same original and coordinates)."""

    sink: DeadLetterSink
    consumer_group: str
    producer: str
    now: Callable[[], datetime] = _utc_now
    published: int = 0

    async def publish(
        self, record: ConsumedRecord, error: BaseException, *, failed_at: datetime | None = None
    ) -> Envelope[DeadLetter]:
        """Publish the letter for `record` (`failed_at`: when it failed; default `now()`)."""
        failed = FailedRecord(
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            value=record.value,
            consumer_group=self.consumer_group,
        )
        when = self.now() if failed_at is None else failed_at
        letter = build_dead_letter(failed, error=error, failed_at=when, producer=self.producer)
        await self.sink.send(DEAD_LETTER_TOPIC, letter)
        self.published += 1
        return letter
