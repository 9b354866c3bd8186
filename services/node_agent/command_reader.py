"""This node's command and clock readers: the node agent's consume loop.

Reading commands. Bind and evict commands are keyed by node, so all of this node's commands are
in one partition of each topic (the producer's murmur2 partitioner). The agent assigns itself
exactly those two partitions (no group membership: no rebalance pause when it restarts, and it
reads 1/6 of the command traffic) and commits its position under its own group
`gfs-agent-<node>`. Other nodes share the partition; their records are skipped by key, unread.

A fresh group (no committed offset) starts at `now - agent_command_max_age_s` (offsets_for_times),
never at the beginning: a new agent must not act on week-old commands. Staleness is also checked
on each command's signed `issued_at`, whatever the offset.

Offsets are committed after a fetched batch is handled: binds started and acknowledged,
evictions SIGTERMed and journaled as accepted (their acks follow when the grace period ends; an
accepted eviction is resumed from the journal after a restart).

Reading the clock (`agent_clock = "topic"` only). The agent assigns itself gfs.control.clock (one
partition, no group) positioned at its end as of start-up, resolved before the agent reports
ready: ticks published from then on are all seen, older ones never replayed (a restarted agent
starts on the wall clock until the next ADVANCE). Each tick goes to `NodeAgent.on_tick`.

The platform's `consume` does not fit here: it joins a consumer group (rebalances) and reads whole
topics, where the agent assigns itself one partition per topic, skips other nodes' records by key
and flushes its journal before each commit. What it shares with the platform is the dead-letter
publisher and the order of effects (decide, persist, publish, then commit).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.partitioner import DefaultPartitioner
from opentelemetry import trace

from gfs.schemas.clock import ClockTick
from gfs.schemas.topics import BIND_TOPIC, CLOCK_TOPIC, EVICT_TOPIC, decode, topic
from gfs.services.node_agent.agent import PRODUCER, TRACER, NodeAgent
from gfs.services.node_agent.security import Rejection
from gfs.services.platform import deployment as deployment_ids
from gfs.services.platform.kafka.dead_letter import DeadLetterPublisher, describe_error
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka_security import PLAINTEXT, KafkaSecurity, announce
from gfs.services.platform.tracing import extract_context

# The service's logger name, kept for the records it always wrote (log filters, tests' caplog).
log = logging.getLogger("gfs.services.node_agent.service")

COMMAND_TOPICS = (BIND_TOPIC, EVICT_TOPIC)
_HANDLER_ATTEMPTS = 3


def group_of(node: str) -> str:
    return f"gfs-agent-{node}"


class CommandReader:
    """This node's partitions of the command topics, positioned and committed as documented above."""

    def __init__(
        self, *, node: str, servers: list[str], max_age_s: float, security: KafkaSecurity = PLAINTEXT
    ) -> None:
        self.node = node
        self.key = node.encode("utf-8")
        self.servers = servers
        self.max_age_s = max_age_s
        # On a secured broker the agent is principal `agent-<node>`: it may read the command
        # topics and commit under its own group only (services/platform/kafka/acls.py).
        self.security = security
        announce(security)
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=servers,
            group_id=group_of(node),
            enable_auto_commit=False,
            auto_offset_reset="latest",  # never reached for a fresh group: see `start`
            isolation_level="read_committed",
            **security.client_kwargs(),
        )

    async def partitions(self) -> list[TopicPartition]:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.servers, **self.security.client_kwargs())
        await admin.start()
        try:
            described = await admin.describe_topics(list(COMMAND_TOPICS))
        finally:
            await admin.close()
        out = []
        for info in described:
            if info.get("error_code"):
                raise RuntimeError(f"cannot describe {info['topic']}: error {info['error_code']}")
            ids = sorted(p["partition"] for p in info["partitions"])
            out.append(TopicPartition(info["topic"], DefaultPartitioner()(self.key, ids, ids)))
        return out

    async def start(self, now: datetime) -> None:
        assigned = await self.partitions()
        self.consumer.assign(assigned)
        await self.consumer.start()
        since_ms = int((now - timedelta(seconds=self.max_age_s)).timestamp() * 1000)
        for tp in assigned:
            if await self.consumer.committed(tp) is not None:
                continue
            found = (await self.consumer.offsets_for_times({tp: since_ms})).get(tp)
            if found is None:
                await self.consumer.seek_to_end(tp)
            else:
                self.consumer.seek(tp, found.offset)
            log.info("fresh group %s: %s starts at %s", group_of(self.node), tp, found or "the end")

    async def stop(self) -> None:
        await self.consumer.stop()


class ClockReader:
    """gfs.control.clock from its end as of `start` (module doc)."""

    def __init__(self, *, servers: list[str], security: KafkaSecurity = PLAINTEXT) -> None:
        announce(security)
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=servers, enable_auto_commit=False, isolation_level="read_committed",
            **security.client_kwargs(),
        )  # fmt: skip
        self.partitions = [TopicPartition(CLOCK_TOPIC, p) for p in range(topic(CLOCK_TOPIC).partitions)]

    async def start(self) -> None:
        self.consumer.assign(self.partitions)
        await self.consumer.start()
        await self.consumer.seek_to_end(*self.partitions)
        for tp in self.partitions:
            # Resolves the end offset now: a tick published once the agent is ready is after it.
            log.info("clock: %s starts at offset %d", tp, await self.consumer.position(tp))

    async def stop(self) -> None:
        await self.consumer.stop()


async def follow_clock(reader: ClockReader, agent: NodeAgent, stop: asyncio.Event) -> None:
    while not stop.is_set():
        batch = await reader.consumer.getmany(timeout_ms=200)
        for records in batch.values():
            for record in records:
                try:
                    payload = decode(record.topic, record.value or b"").payload
                except ValueError as exc:  # a driver's bug, not ours: say so and go on
                    log.warning(
                        "undecodable clock record at offset %d: %s", record.offset, describe_error(exc)
                    )
                    continue
                if isinstance(payload, ClockTick):
                    await agent.on_tick(payload)


async def read_commands(
    reader: CommandReader,
    agent: NodeAgent,
    producer: EnvelopeProducer,
    stop: asyncio.Event,
    clock: Callable[[], datetime],
) -> None:
    tracer = trace.get_tracer(TRACER)
    while not stop.is_set():
        batch = await reader.consumer.getmany(timeout_ms=200)
        received_at = clock()
        for tp, records in batch.items():
            for record in records:
                if record.key != reader.key:
                    continue  # another node's command sharing the partition
                if deployment_ids.foreign(record.headers, producer.deployment):
                    continue  # another deployment's command for a node of the same name
                await _process(record, agent, producer, tracer, received_at)
            agent.journal.flush()  # what the batch's commands changed is on disk before the commit
            await reader.consumer.commit({tp: records[-1].offset + 1})


async def _process(
    record: ConsumerRecord[bytes, bytes],
    agent: NodeAgent,
    producer: EnvelopeProducer,
    tracer: trace.Tracer,
    received_at: datetime,
) -> None:
    headers = tuple(record.headers or ())
    with tracer.start_as_current_span(
        f"agent.receive {record.topic}",
        context=extract_context(headers),
        kind=trace.SpanKind.CONSUMER,
        attributes={
            "messaging.system": "kafka",
            "messaging.destination.name": record.topic,
            "messaging.destination.partition.id": str(record.partition),
            "messaging.kafka.offset": record.offset,
            "gfs.node": agent.node,
        },
    ):
        try:
            envelope = decode(record.topic, record.value or b"")
        except ValueError as exc:  # not a command at all: dead-letter it, count it, go on
            letters = DeadLetterPublisher(
                sink=producer, consumer_group=group_of(agent.node), producer=PRODUCER
            )
            await letters.publish(record, exc, failed_at=received_at)
            agent.reject(Rejection.UNDECODABLE, f"{record.topic}@{record.offset}: {describe_error(exc)}")
            return
        for attempt in range(1, _HANDLER_ATTEMPTS + 1):
            try:
                await agent.handle(envelope, headers=headers, received_at=received_at)
                return
            except Exception as exc:
                # The command is journaled before any effect, so a retry (or a redelivery after a
                # crash) answers it from the journal instead of acting twice.
                log.warning(
                    "handling %s@%d failed (attempt %d): %r", record.topic, record.offset, attempt, exc
                )
                if attempt == _HANDLER_ATTEMPTS:
                    raise
                await asyncio.sleep(0.2 * 2 ** (attempt - 1))
