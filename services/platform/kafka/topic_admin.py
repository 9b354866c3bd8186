"""Create the registry's topics on a broker: partitions, retention, compaction. Idempotent.

`ensure_topics` is declarative: topics missing from the broker are created; topics that exist
get their registry configs (retention.ms, cleanup.policy) re-applied, so a changed retention in
`schemas/topics.py` reaches the broker on the next `gfs stack topics`. Partition counts are never
changed automatically (that would move keys between partitions and break per-key ordering);
a mismatch is reported instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import for_code

from gfs.schemas.topics import TopicSpec
from gfs.services.platform.kafka_security import PLAINTEXT, KafkaSecurity

# Kafka's "topic already exists" error code; a concurrent `gfs stack topics` may win the race.
_TOPIC_ALREADY_EXISTS = 36


def new_topic(spec: TopicSpec, *, replication_factor: int) -> NewTopic:
    return NewTopic(
        name=spec.name,
        num_partitions=spec.partitions,
        replication_factor=replication_factor,
        topic_configs=spec.kafka_config(),
    )


@dataclass(frozen=True, slots=True)
class TopicsReport:
    created: tuple[str, ...] = ()
    reconfigured: tuple[str, ...] = ()
    # (topic, partitions on the broker, partitions in the registry)
    partition_mismatches: tuple[tuple[str, int, int], ...] = field(default=())


async def ensure_topics(
    bootstrap_servers: list[str] | str,
    specs: Iterable[TopicSpec],
    *,
    replication_factor: int = 1,
    timeout_ms: int = 30_000,
    security: KafkaSecurity = PLAINTEXT,
) -> TopicsReport:
    """Make the broker match `specs` (see module docstring). Raises a KafkaError on failure."""
    wanted = {spec.name: spec for spec in specs}
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap_servers, request_timeout_ms=timeout_ms, **security.client_kwargs()
    )
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [wanted[name] for name in sorted(wanted) if name not in existing]
        present = [wanted[name] for name in sorted(wanted) if name in existing]
        created: list[str] = []
        raced: list[TopicSpec] = []
        if missing:
            response = await admin.create_topics(
                [new_topic(spec, replication_factor=replication_factor) for spec in missing],
                timeout_ms=timeout_ms,
            )
            for name, code, message in _topic_errors(response):
                if code == _TOPIC_ALREADY_EXISTS:
                    raced.append(wanted[name])
                elif code:
                    raise for_code(code)(f"cannot create topic {name}: {message}")
                else:
                    created.append(name)
        to_reconfigure = present + raced
        if to_reconfigure:
            await _apply_configs(admin, to_reconfigure)
        mismatches = await _partition_mismatches(admin, to_reconfigure)
    finally:
        await admin.close()
    return TopicsReport(
        created=tuple(sorted(created)),
        reconfigured=tuple(sorted(spec.name for spec in to_reconfigure)),
        partition_mismatches=mismatches,
    )


def _topic_errors(response: Any) -> list[tuple[str, int, str | None]]:
    """(topic, error_code, message) from any CreateTopicsResponse version."""
    rows = []
    for entry in response.topic_errors:
        name, code = entry[0], entry[1]
        message = entry[2] if len(entry) > 2 else None
        rows.append((name, code, message))
    return rows


async def _apply_configs(admin: AIOKafkaAdminClient, specs: Sequence[TopicSpec]) -> None:
    resources = [ConfigResource(ConfigResourceType.TOPIC, spec.name, spec.kafka_config()) for spec in specs]
    for response in await admin.alter_configs(resources):
        for entry in response.resources:
            code, message, name = entry[0], entry[1], entry[3]
            if code:
                raise for_code(code)(f"cannot configure topic {name}: {message}")


async def _partition_mismatches(
    admin: AIOKafkaAdminClient, specs: Sequence[TopicSpec]
) -> tuple[tuple[str, int, int], ...]:
    if not specs:
        return ()
    described = await admin.describe_topics([spec.name for spec in specs])
    have = {entry["topic"]: len(entry["partitions"]) for entry in described}
    return tuple(
        (spec.name, have[spec.name], spec.partitions)
        for spec in specs
        if spec.name in have and have[spec.name] != spec.partitions
    )
