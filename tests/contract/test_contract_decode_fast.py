"""`decode`'s one-pass path (pydantic-core validating the bytes, issue 23) accepts exactly what the
step-by-step reference accepts, with the same result; what it refuses falls back to the reference,
so dead letters keep their reasons."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gfs.schemas import decoding
from gfs.schemas.envelope import Envelope
from gfs.schemas.topics import decode, topic, topic_for_event_type
from tests.contract.contract_goldens import golden_id, golden_message, golden_paths, to_bytes


def _decode_fast(topic_name: str, raw: bytes) -> Envelope[Any] | None:
    return decoding._decode_fast(topic(topic_name), raw)


def _decode_checked(topic_name: str, raw: bytes) -> Envelope[Any]:
    return decoding._decode_checked(topic(topic_name), raw)


HOT = ("TaskSubmitted", "TaskCancelled", "NodeTelemetry", "EvictAck", "WorkerStarted", "WorkerExited")


def _topic_of(path: Path) -> str:
    return topic_for_event_type(path.stem).name


@pytest.mark.parametrize("path", golden_paths(), ids=golden_id)
def test_every_golden_message_takes_the_one_pass_path_and_decodes_as_the_reference_does(path: Path) -> None:
    raw = path.read_bytes()
    fast = _decode_fast(_topic_of(path), raw)
    assert fast is not None, "a well-formed message must not need the reference path"
    assert fast == _decode_checked(_topic_of(path), raw)


def _refusal(topic: str, raw: bytes) -> str | None:
    try:
        _decode_checked(topic, raw)
    except (ValueError, KeyError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


# Hand-picked records each path could treat differently: encodings, JSON oddities json.loads
# accepts and pydantic-core does not (or the reverse), a version from the future, another topic's
# event type, an event type the envelope's payload does not name.
ODD = {
    "bom": lambda raw, _: b"\xef\xbb\xbf" + raw,
    "utf16": lambda raw, _: raw.decode().encode("utf-16"),
    "trailing": lambda raw, _: raw + b" x",
    "nan": lambda raw, _: raw.replace(b'"schema_version": 1', b'"schema_version": NaN'),
    "version-2": lambda raw, _: raw.replace(b'"schema_version": 1', b'"schema_version": 2'),
    "version-true": lambda raw, _: raw.replace(b'"schema_version": 1', b'"schema_version": true'),
    "duplicate-key": lambda raw, _: raw.replace(b'"producer"', b'"producer": "x", "producer"', 1),
    "surrogate": lambda raw, _: raw.replace(b'"producer": "', b'"producer": "\\ud800', 1),
    "other-topic-type": lambda raw, et: raw.replace(f'"{et}"'.encode(), b'"BindCommand"', 1),
    "no-event-type": lambda raw, _: raw.replace(b'"event_type"', b'"event_kind"', 1),
    "array": lambda raw, _: b"[" + raw + b"]",
}


@pytest.mark.parametrize("event_type", HOT)
@pytest.mark.parametrize("odd", sorted(ODD))
def test_odd_records_decode_or_fail_exactly_as_the_reference_says(event_type: str, odd: str) -> None:
    topic = topic_for_event_type(event_type).name
    raw = ODD[odd](to_bytes(golden_message(event_type)), event_type)
    refusal = _refusal(topic, raw)
    fast = _decode_fast(topic, raw)
    if refusal is not None:
        assert fast is None, f"the one-pass path accepted what the reference refuses ({refusal})"
        with pytest.raises((ValueError, KeyError)) as caught:
            decode(topic, raw)
        assert f"{type(caught.value).__name__}: {caught.value}" == refusal  # the same reason
    else:
        assert decode(topic, raw) == _decode_checked(topic, raw)


_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(event_type=st.sampled_from(HOT), index=st.integers(0, 30), value=_values, in_payload=st.booleans())
def test_a_changed_field_is_accepted_by_the_one_pass_path_only_when_the_reference_accepts_it(
    event_type: str, index: int, value: object, in_payload: bool
) -> None:
    message = golden_message(event_type)
    target = message["payload"] if in_payload else message
    keys = sorted(target)
    target[keys[index] if index < len(keys) else f"unknown_{index}"] = value  # a contract field or not
    topic = topic_for_event_type(event_type).name
    raw = json.dumps(message).encode()
    fast = _decode_fast(topic, raw)
    if _refusal(topic, raw) is not None:
        assert fast is None
    else:
        assert fast == _decode_checked(topic, raw)
