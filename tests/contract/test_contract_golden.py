"""Golden messages: every hand-written example of every schema version must still decode.

A failure here means a schema change would break messages already on the wire (or in a compacted
topic, or a replayed log): make the change backwards compatible or add a new schema version.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from contract_goldens import SCHEMA_VERSIONS, golden_id, golden_message, golden_paths, to_bytes
from pydantic import BaseModel, ValidationError

from gfs.schemas.topics import TOPICS, decode, encode, key_of, topic_for_event_type

ALL_EVENT_TYPES = sorted(event_type for spec in TOPICS for event_type in spec.event_types())


def test_there_is_a_schema_version_folder() -> None:
    assert "v1" in SCHEMA_VERSIONS


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_every_event_type_has_a_golden_example(version: str) -> None:
    present = sorted(p.stem for p in golden_paths() if p.parent.name == version)
    if version == "v1":
        assert present == ALL_EVENT_TYPES
    else:  # a later version only needs examples of the payloads it changed
        assert set(present) <= set(ALL_EVENT_TYPES)


@pytest.mark.parametrize("path", golden_paths(), ids=golden_id)
def test_golden_example_decodes_on_its_topic(path: Path) -> None:
    raw = path.read_bytes()
    spec = topic_for_event_type(path.stem)
    env = decode(spec.name, raw)
    assert env.event_type == path.stem
    assert type(env.payload).__name__ == path.stem
    assert isinstance(env.payload, BaseModel)


@pytest.mark.parametrize("path", golden_paths(), ids=golden_id)
def test_golden_example_round_trips(path: Path) -> None:
    """decode -> encode -> decode gives an equal envelope, and the bytes carry the same JSON."""
    spec = topic_for_event_type(path.stem)
    env = decode(spec.name, path.read_bytes())
    encoded = encode(env)
    assert decode(spec.name, encoded) == env
    # Same data as the hand-written file (ints and floats compare equal: 8 == 8.0), except payload
    # fields added (backwards compatibly) after the file was written: those carry their defaults.
    written, golden = json.loads(encoded), json.loads(path.read_text())
    payload_type = type(env.payload)
    added = set(written["payload"]) - set(golden["payload"])
    for name in added:
        assert written["payload"].pop(name) == payload_type.model_fields[name].default, name
    assert written == golden


@pytest.mark.parametrize("path", golden_paths(), ids=golden_id)
def test_golden_example_is_rejected_on_other_topics(path: Path) -> None:
    own = topic_for_event_type(path.stem)
    for spec in TOPICS:
        if spec is own:
            continue
        with pytest.raises(ValidationError) as info:
            decode(spec.name, path.read_bytes())
        assert info.value.errors()[0]["loc"] == ("event_type",)


@pytest.mark.parametrize(
    ("event_type", "expected_key"),
    [
        ("TaskSubmitted", b"job-7c1e2a"),
        ("GuaranteePeriodClosed", b"job-7c1e2a"),
        ("NodeTelemetry", b"a10-node-0311"),
        ("DemandForecast", b"A100-SXM4-80GB"),
        ("SpotQuota", b"A100-SXM4-80GB"),
        ("EvictCommand", b"a100-node-017"),
        ("DeadLetter", b"gfs.tasks.submit"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_key_of_reads_the_registry_key_field(event_type: str, expected_key: bytes) -> None:
    spec = topic_for_event_type(event_type)
    assert key_of(decode(spec.name, to_bytes(golden_message(event_type)))) == expected_key
