"""The envelope every Kafka message value carries: who, what, when, and the payload.

Trace context travels in Kafka headers, not here, so the envelope (and its JSON Schema) stays the
same whether or not tracing is on, and replaying a topic never resurrects a stale trace id.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Generic, TypeVar
from uuid import UUID, uuid4

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gfs.schemas.fields import FreeText, ShortName, UtcDatetime

P = TypeVar("P")
M = TypeVar("M", bound=BaseModel)

CURRENT_SCHEMA_VERSION = 1
"""The payload schema version this code writes. Old versions must keep decoding (see the golden
examples under tests/contract/golden/v<N>/)."""

SUPPORTED_SCHEMA_VERSIONS: frozenset[int] = frozenset({1})
"""Versions this code can read. A newer one (a producer upgraded before its consumers) is refused
by `gfs.schemas.topics.decode` with a reason, so it goes to the dead-letter topic instead of being
read as if its fields meant what version 1's mean."""


class Envelope(BaseModel, Generic[P]):
    """One event or command on the wire.

    `event_type` is the payload class name and is what `gfs.schemas.topics.decode` dispatches on; a
    mismatch between `event_type` and the payload's class is rejected so the two can never
    disagree on the wire.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    event_id: UUID = Field(default_factory=uuid4, description="Unique per message; consumers dedupe on it.")
    event_type: ShortName = Field(description="The payload's class name, e.g. 'TaskSubmitted'.")
    schema_version: int = Field(
        default=CURRENT_SCHEMA_VERSION, ge=1, description="Version of the payload's schema."
    )
    occurred_at: UtcDatetime = Field(description="When the event happened (timezone-aware; stored in UTC).")
    producer: FreeText = Field(
        min_length=1, max_length=200, description="The service (or tool) that produced the message."
    )
    payload: P = Field(description="The event or command itself; its type is named by event_type.")

    @model_validator(mode="after")
    def _event_type_names_payload(self) -> Envelope[P]:
        # Only checkable when the payload is a model; an unparametrised Envelope[Any] built from
        # raw dicts has nothing to compare against (decode always parametrises).
        if isinstance(self.payload, BaseModel):
            actual = type(self.payload).__name__
            if self.event_type != actual:
                raise ValueError(
                    f"event_type {self.event_type!r} does not match the payload, which is a {actual}"
                )
        return self


def envelope_type(payload_type: type[M]) -> type[Envelope[M]]:
    """`Envelope[payload_type]` for a payload type known only at run time (pydantic caches it)."""
    return Envelope[payload_type]  # type: ignore[valid-type]


def wrap(payload: M, *, producer: str, occurred_at: datetime | None = None) -> Envelope[M]:
    """Put `payload` in a fresh envelope (new event_id, event_type = the payload's class name).

    `occurred_at` defaults to now in UTC; pass it explicitly wherever the caller has an injected
    clock so the message is deterministic in tests and replays.
    """
    when = occurred_at if occurred_at is not None else datetime.now(UTC)
    model = envelope_type(type(payload))
    return model(event_type=type(payload).__name__, occurred_at=when, producer=producer, payload=payload)
