"""Dead-letter records: what the consumer publishes when a message cannot be decoded.

Pure functions only (no Kafka here) so the record and its human-readable reason are unit-tested
without a broker; `services.platform.kafka.consumer` publishes the result to
`schemas.topics.DEAD_LETTER_TOPIC`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime

from pydantic import ValidationError

from schemas.dead_letter import DeadLetter
from schemas.envelope import Envelope, wrap

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
        source_topic=record.topic,
        source_partition=record.partition,
        source_offset=record.offset,
        failed_at=failed_at,
        consumer_group=record.consumer_group,
    )
    return wrap(payload, producer=producer, occurred_at=failed_at)
