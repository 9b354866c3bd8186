"""How a record read from a topic is decoded and validated (`gfs.schemas.topics.decode`'s work).

Kept apart from the registry (topics.py) so the registry reads as the list of topics; this module
knows nothing of which topics exist: it is handed the topic's spec.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from gfs.schemas.envelope import SUPPORTED_SCHEMA_VERSIONS, Envelope, envelope_type


class TopicSpec(Protocol):
    """What decoding reads of a topic's registry entry (`gfs.schemas.topics.TopicSpec`)."""

    @property
    def name(self) -> str: ...

    @property
    def payload_types(self) -> tuple[type[BaseModel], ...]: ...

    def payload_type(self, event_type: str) -> type[BaseModel]: ...

    def event_types(self) -> tuple[str, ...]: ...


class _Head(BaseModel):
    """The two envelope fields that choose the payload type, read before the whole record."""

    model_config = ConfigDict(extra="ignore")
    event_type: object = None
    schema_version: object = None


def decode_for(spec: TopicSpec, raw: bytes) -> Envelope[Any]:
    """`gfs.schemas.topics.decode` for the topic `spec` describes.

    A well-formed record is parsed and validated in one pass by pydantic-core
    (`model_validate_json`: about half the time of json.loads then model_validate, and faster
    than orjson or msgspec then model_validate; `services/platform/kafka/codec_bench.py`, issue 23).
    A record that pass refuses is decoded again the reference way (`_decode_checked`), which
    raises the errors, with the reasons dead letters carry, that it always raised.
    """
    found = _decode_fast(spec, raw)
    return found if found is not None else _decode_checked(spec, raw)


def _decode_fast(spec: TopicSpec, raw: bytes) -> Envelope[Any] | None:
    """The record validated straight from its bytes, or None when anything is off (the checked
    path then says what). Accepts only what `_decode_checked` accepts: the same models validate,
    and the event type and version are checked the same way."""
    try:
        models = _envelope_models(spec.payload_types)
        if len(models) == 1:
            (model,) = models.values()  # a wrong event_type fails the envelope's own check
        else:
            head = _Head.model_validate_json(raw)
            if not isinstance(head.event_type, str):
                return None
            model = models[head.event_type]
        envelope = model.model_validate_json(raw)
    except (ValueError, KeyError):  # pydantic's ValidationError is a ValueError
        return None
    if envelope.schema_version not in SUPPORTED_SCHEMA_VERSIONS:
        return None
    return envelope


@cache
def _envelope_models(payload_types: tuple[type[BaseModel], ...]) -> dict[str, type[Envelope[Any]]]:
    """Event type -> its envelope model, for a topic's payload types. Cached: looking up a
    parametrised generic model costs as much as a small record's parse."""
    return {t.__name__: envelope_type(t) for t in payload_types}


def _decode_checked(spec: TopicSpec, raw: bytes) -> Envelope[Any]:
    """`decode` step by step (the reference, and the path of every refused record)."""
    # Decode UTF-8 explicitly: json.loads(bytes) would also sniff UTF-16/32, which the contract
    # (UTF-8 JSON) does not allow.
    data = json.loads(raw.decode("utf-8"))
    if not isinstance(data, dict):
        raise _validation_error((), "envelope_type", "the message must be a JSON object", data)
    event_type = data.get("event_type")
    if not isinstance(event_type, str):
        raise _validation_error(
            ("event_type",), "missing_event_type", "event_type must be present and a string", event_type
        )
    try:
        payload_type = spec.payload_type(event_type)
    except KeyError:
        raise _validation_error(
            ("event_type",),
            "unknown_event_type",
            f"event_type {event_type[:100]!r} is not carried by topic {spec.name!r} "
            f"(expected one of {list(spec.event_types())})",
            event_type,
        ) from None
    version = data.get("schema_version")
    # Only a well-formed version (an int >= 1) is checked here; anything else fails validation.
    if type(version) is int and version >= 1 and version not in SUPPORTED_SCHEMA_VERSIONS:
        raise _validation_error(
            ("schema_version",),
            "unsupported_schema_version",
            f"schema_version {version} is not supported by this consumer "
            f"(it reads {sorted(SUPPORTED_SCHEMA_VERSIONS)}): upgrade the consumer, then replay "
            "this record from the dead-letter topic",
            version,
        )
    return envelope_type(payload_type).model_validate(data)


def _validation_error(loc: tuple[str, ...], kind: str, message: str, given: object) -> ValidationError:
    # A real ValidationError (not a bare ValueError) so consumers and the dead-letter path handle
    # envelope-level and field-level failures the same way.
    # Without a context dict pydantic-core does not format the template, so braces in user data
    # are shown as they are.
    detail: InitErrorDetails = {"type": PydanticCustomError(kind, message), "loc": loc, "input": given}
    return ValidationError.from_exception_data(title="Envelope", line_errors=[detail])
