"""The topic registry: names, keys, partitions and payload placement are the published contract."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from gfs.schemas import topics as registry
from gfs.schemas.topics import DEAD_LETTER_TOPIC, TOPICS, topic, topic_for_event_type

# The contract other teams code against (brief: topic -> key -> payloads -> partitions).
EXPECTED: dict[str, tuple[str, frozenset[str], int]] = {
    "gfs.tasks.submit": ("task_id", frozenset({"TaskSubmitted", "TaskCancelled"}), 6),
    "gfs.tasks.lifecycle": (
        "task_id",
        frozenset(
            {
                "TaskAccepted",
                "TaskRejected",
                "TaskStarted",
                "TaskFinished",
                "TaskEvicted",
                "TaskWithdrawn",
                "GuaranteePeriodClosed",
                "TaskReclaimWarning",
            }
        ),
        6,
    ),
    "gfs.nodes.telemetry": ("node", frozenset({"NodeTelemetry"}), 6),
    "gfs.forecasts": ("pool", frozenset({"DemandForecast", "PoolDemandForecast"}), 3),
    "gfs.pools.status": ("pool", frozenset({"PoolStatus"}), 3),
    "gfs.pools.demand": ("pool", frozenset({"PoolDemandLevel"}), 3),
    "gfs.quotas": ("pool", frozenset({"SpotQuota"}), 3),
    "gfs.commands.bind": ("node", frozenset({"BindCommand"}), 6),
    "gfs.commands.evict": ("node", frozenset({"EvictCommand", "WarnCommand"}), 6),
    "gfs.commands.evict-ack": ("node", frozenset({"EvictAck"}), 6),
    "gfs.commands.worker-ack": ("node", frozenset({"WorkerStarted", "WorkerExited"}), 6),
    "gfs.control.clock": ("clock", frozenset({"ClockTick"}), 1),
    "gfs.control.clock-acks": ("clock", frozenset({"ClockAck"}), 1),
    "gfs.deadletter": ("source_topic", frozenset({"DeadLetter"}), 1),
}


def test_registry_lists_exactly_the_contracted_topics() -> None:
    assert [spec.name for spec in TOPICS] == list(EXPECTED)


@pytest.mark.parametrize("spec", TOPICS, ids=lambda spec: spec.name)
def test_topic_key_payloads_and_partitions(spec: registry.TopicSpec) -> None:
    key, payloads, partitions = EXPECTED[spec.name]
    assert (spec.key_field, frozenset(spec.event_types()), spec.partitions) == (key, payloads, partitions)


@pytest.mark.parametrize(
    ("payload_type", "spec"),
    [(p, s) for s in TOPICS for p in s.payload_types],
    ids=lambda value: getattr(value, "__name__", getattr(value, "name", "")),
)
def test_key_field_is_a_required_field_of_every_payload(
    payload_type: type[BaseModel], spec: registry.TopicSpec
) -> None:
    field = payload_type.model_fields.get(spec.key_field)
    assert field is not None, f"{payload_type.__name__} has no key field {spec.key_field}"
    assert field.is_required(), "a defaulted key would let messages share a Kafka key by accident"


def test_every_payload_type_lives_on_exactly_one_topic() -> None:
    event_types = [event_type for spec in TOPICS for event_type in spec.event_types()]
    assert len(event_types) == len(set(event_types))


@pytest.mark.parametrize("spec", TOPICS, ids=lambda spec: spec.name)
def test_topic_for_event_type_finds_the_owning_topic(spec: registry.TopicSpec) -> None:
    for event_type in spec.event_types():
        assert topic_for_event_type(event_type) is spec


def test_topic_lookup_and_its_error() -> None:
    assert topic("gfs.quotas").compacted
    with pytest.raises(KeyError, match=r"unknown topic 'gfs\.nope'.*gfs\.tasks\.submit"):
        topic("gfs.nope")
    with pytest.raises(KeyError, match="Nope"):
        topic_for_event_type("Nope")


def test_dead_letter_topic_is_registered_with_long_retention() -> None:
    spec = topic(DEAD_LETTER_TOPIC)
    assert spec.retention_ms is not None
    assert spec.retention_ms >= 7 * 86_400_000


def test_retention_and_compaction_choices() -> None:
    # Telemetry is short-lived (a day at most); quotas and pool status are compacted state (the
    # latest per pool); nothing else compacts.
    telemetry = topic("gfs.nodes.telemetry")
    assert telemetry.retention_ms is not None
    assert telemetry.retention_ms <= 86_400_000
    assert [spec.name for spec in TOPICS if spec.compacted] == ["gfs.pools.status", "gfs.quotas"]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("gfs.quotas", {"cleanup.policy": "compact", "retention.ms": "-1"}),
        ("gfs.nodes.telemetry", {"cleanup.policy": "delete", "retention.ms": "86400000"}),
        # 14 days (issue 25; for ever before): 14 * 86,400,000 ms.
        ("gfs.tasks.submit", {"cleanup.policy": "delete", "retention.ms": "1209600000"}),
        ("gfs.tasks.lifecycle", {"cleanup.policy": "delete", "retention.ms": "1209600000"}),
    ],
    ids=["compacted", "one-day", "submit-two-weeks", "lifecycle-two-weeks"],
)
def test_kafka_config(name: str, expected: dict[str, str]) -> None:
    assert topic(name).kafka_config() == expected


def test_payload_models_are_frozen_and_forbid_extra_fields() -> None:
    for spec in TOPICS:
        for payload_type in spec.payload_types:
            assert payload_type.model_config.get("extra") == "forbid", payload_type.__name__
            assert payload_type.model_config.get("frozen") is True, payload_type.__name__
