"""`gfs stack topics` logic against the broker: every registry topic exists with its partitions,
retention and cleanup policy, and a second run creates nothing."""

from __future__ import annotations

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from gfs.schemas.topics import TOPICS
from gfs.services.platform.kafka.topic_admin import TopicsReport, ensure_topics

pytestmark = pytest.mark.integration


async def test_broker_topics_match_the_registry_and_a_rerun_creates_nothing(
    registry_topics: TopicsReport, kafka_bootstrap: str
) -> None:
    again = await ensure_topics(kafka_bootstrap, TOPICS)
    assert again.created == ()
    assert again.reconfigured == tuple(sorted(spec.name for spec in TOPICS))
    assert again.partition_mismatches == ()

    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics([spec.name for spec in TOPICS])
        partitions = {entry["topic"]: len(entry["partitions"]) for entry in described}
        wanted_keys = {"cleanup.policy": None, "retention.ms": None}
        resources = [
            ConfigResource(ConfigResourceType.TOPIC, spec.name, dict(wanted_keys)) for spec in TOPICS
        ]
        configs: dict[str, dict[str, str]] = {}
        for response in await admin.describe_configs(resources):
            for _code, _message, _type, name, entries in response.resources:
                configs[name] = {entry[0]: entry[1] for entry in entries}
    finally:
        await admin.close()

    for spec in TOPICS:
        assert partitions[spec.name] == spec.partitions, spec.name
        assert configs[spec.name] == spec.kafka_config(), spec.name
