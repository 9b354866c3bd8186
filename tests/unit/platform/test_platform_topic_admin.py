"""The NewTopic requests built from the registry (the broker round trip is integration)."""

from __future__ import annotations

import pytest

from gfs.schemas.topics import TOPICS, topic
from gfs.services.platform.kafka.topic_admin import new_topic


@pytest.mark.parametrize(
    ("name", "partitions", "cleanup", "retention"),
    [
        ("gfs.quotas", 3, "compact", "-1"),
        ("gfs.tasks.submit", 6, "delete", str(14 * 24 * 3_600_000)),  # two weeks (issue 25)
        ("gfs.nodes.telemetry", 6, "delete", str(24 * 3_600_000)),
        ("gfs.deadletter", 1, "delete", str(30 * 24 * 3_600_000)),
    ],
    ids=["compacted-quotas", "two-weeks-submit", "one-day-telemetry", "dead-letters"],
)
def test_new_topic_carries_partitions_and_configs(
    name: str, partitions: int, cleanup: str, retention: str
) -> None:
    request = new_topic(topic(name), replication_factor=1)
    assert (request.name, request.num_partitions, request.replication_factor) == (name, partitions, 1)
    assert request.topic_configs == {"cleanup.policy": cleanup, "retention.ms": retention}


def test_every_registry_topic_builds_a_request() -> None:
    names = {new_topic(spec, replication_factor=3).name for spec in TOPICS}
    assert names == {spec.name for spec in TOPICS}
