"""Dead letters: messages a consumer could not decode or handle, kept with where they came from."""

from __future__ import annotations

import base64
import binascii

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gfs.schemas.fields import UtcDatetime

_CONTRACT = ConfigDict(extra="forbid", frozen=True)


class DeadLetter(BaseModel):
    """A poisoned record. Keyed by `source_topic` on gfs.deadletter.

    The original value is kept as base64 text because it may not be valid UTF-8 or JSON at all.
    """

    model_config = _CONTRACT

    original: str = Field(description="The record's value bytes, base64-encoded (standard alphabet).")
    error: str = Field(min_length=1, description="Why it failed, naming the field where possible.")
    source_topic: str = Field(min_length=1, description="The topic the record was read from.")
    source_partition: int = Field(ge=0, description="Its partition.")
    source_offset: int = Field(ge=0, description="Its offset.")
    failed_at: UtcDatetime = Field(description="When the consumer gave up on it.")
    consumer_group: str = Field(min_length=1, description="The consumer group that failed.")
    # Added after v1's first golden (defaults keep older dead letters readable).
    original_size: int | None = Field(
        default=None, ge=0, description="Length of the record's value in bytes (None: not recorded)."
    )
    original_sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="SHA-256 (hex) of the whole value, to match a truncated letter with its record.",
    )
    truncated: bool = Field(
        default=False,
        description="True when `original` holds only the first bytes of a value too large to keep whole.",
    )
    reason: str | None = Field(
        default=None,
        pattern=r"^[a-z][a-z0-9_]{0,63}$",
        description=(
            "Why, as a code a tool can match (docs/protocol.md, 'Dead letters'): malformed_json, "
            "not_utf8, envelope_type, missing_event_type, unknown_event_type, "
            "unsupported_schema_version, invalid_payload, unsigned, malformed_signature, "
            "signature_mismatch, previous_key_expired, unmatched, store_failed, unroutable, future_event, "
            "failed; `error` says it in words. None: a letter written before codes existed."
        ),
    )

    @field_validator("original")
    @classmethod
    def _is_base64(cls, value: str) -> str:
        try:
            base64.b64decode(value, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"must be standard base64 ({exc})") from None
        return value
