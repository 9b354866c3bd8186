"""What the secured broker's ACL table lets each principal do (issue 25, item 2), on the real
SASL_SSL broker of `infra/kafka/secure.sh` (secure_broker.py; the session fixture `secure_broker`,
shared with test_kafka_security_clients.py).

Checked, with hand-worked expectations (the ACL table's rows, not the broker's answers, say what
must pass):
- a TaskSubmitted from an agent's principal is refused by the broker (TopicAuthorizationFailed)
  and nothing reaches the topic;
- a signed EvictCommand and BindCommand from a producer's principal are refused the same way;
- an agent's principal acking for another node passes the broker (it may write acks) but the real
  preemption service, connected as `preemption`, refuses it by its node signature and
  dead-letters it;
- the allowed path: `producer` submits, a consumer group of `preemption` reads the submission;
- a client without TLS/SASL, or with a wrong password, gets nothing.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError, TopicAuthorizationFailedError
from live_cluster import _get, _until
from live_harness import ServiceProcess
from payload_examples import task_submitted
from quota_harness import _free_port, _migrated
from secure_broker import SecureBroker, end_offsets

from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome
from gfs.schemas.dead_letter import DeadLetter
from gfs.schemas.envelope import Envelope, wrap
from gfs.schemas.tasks import EvictionReason, Placement, TaskClass
from gfs.schemas.telemetry import GpuSample, NodeTelemetry
from gfs.schemas.topics import (
    BIND_TOPIC,
    DEAD_LETTER_TOPIC,
    EVICT_ACK_TOPIC,
    EVICT_TOPIC,
    TASK_SUBMIT_TOPIC,
    TELEMETRY_TOPIC,
    decode,
)
from gfs.services.platform.kafka.consumer import consume
from gfs.services.platform.kafka.processing import MessageContext
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.signing import node_key, sign

pytestmark = pytest.mark.integration


async def _send_refused(
    broker: SecureBroker, principal: str, topic_name: str, envelope: Envelope[Any]
) -> None:
    before = await end_offsets(broker, topic_name)
    async with EnvelopeProducer(
        bootstrap_servers=broker.bootstrap, client_id=f"it-{principal}", security=broker.security(principal)
    ) as producer:
        with pytest.raises(TopicAuthorizationFailedError):
            await asyncio.wait_for(producer.send(topic_name, envelope), timeout=60)
    assert await end_offsets(broker, topic_name) == before, f"{principal} wrote to {topic_name}"


@pytest.mark.asyncio(loop_scope="session")
async def test_a_submission_from_an_agents_principal_is_refused(secure_broker: SecureBroker) -> None:
    submission = wrap(task_submitted(f"sec-{uuid.uuid4().hex[:8]}"), producer="agent-n1")
    await _send_refused(secure_broker, "agent-n1", TASK_SUBMIT_TOPIC, submission)


@pytest.mark.asyncio(loop_scope="session")
async def test_a_command_from_a_producers_principal_is_refused(secure_broker: SecureBroker) -> None:
    # Signed with a real node key: the broker must refuse it for who sends it, not for its content.
    key = node_key(b"security-test-secret", "n1")
    now = datetime.now(UTC)
    evict = EvictCommand(
        command_id=uuid.uuid4(), node="n1", task_ids=("victim",), reason=EvictionReason.PREEMPTED_BY_HP,
        grace_seconds=5.0, issued_at=now,
    )  # fmt: skip
    bind = BindCommand(
        command_id=uuid.uuid4(), node="n1", task_id="intruder", task_class=TaskClass.SPOT,
        placements=(Placement(worker_index=0, node="n1", gpu_indices=(0,)),),
        command=("sleep", "60"), issued_at=now,
    )  # fmt: skip
    await _send_refused(
        secure_broker, "producer", EVICT_TOPIC, wrap(sign(evict, key=key), producer="producer")
    )
    await _send_refused(secure_broker, "producer", BIND_TOPIC, wrap(sign(bind, key=key), producer="producer"))


@pytest.mark.asyncio(loop_scope="session")
async def test_a_producers_submission_is_read_by_the_preemption_principal(
    secure_broker: SecureBroker,
) -> None:
    task = task_submitted(f"sec-ok-{uuid.uuid4().hex[:8]}")
    async with EnvelopeProducer(
        bootstrap_servers=secure_broker.bootstrap,
        client_id="it-producer",
        security=secure_broker.security("producer"),
    ) as producer:
        await producer.send(TASK_SUBMIT_TOPIC, wrap(task, producer="it-producer"))

    seen: list[str] = []
    stop = asyncio.Event()

    async def handler(envelope: Envelope[Any], context: MessageContext) -> None:
        seen.append(getattr(envelope.payload, "task_id", ""))
        if task.task_id in seen:
            stop.set()

    # A group under preemption's prefix (the ACL table), unique to this run.
    await asyncio.wait_for(
        consume(
            TASK_SUBMIT_TOPIC, f"gfs-preemption-it-{uuid.uuid4().hex[:8]}", handler,
            bootstrap_servers=secure_broker.bootstrap, stop=stop,
            security=secure_broker.security("preemption"),
        ),
        timeout=90,
    )  # fmt: skip
    assert task.task_id in seen


@pytest.mark.asyncio(loop_scope="session")
async def test_clients_without_credentials_get_nothing(secure_broker: SecureBroker) -> None:
    plaintext = EnvelopeProducer(bootstrap_servers=secure_broker.bootstrap, client_id="it-plain")
    with pytest.raises((KafkaConnectionError, KafkaError, asyncio.TimeoutError)):
        await asyncio.wait_for(plaintext.__aenter__(), timeout=20)
    with contextlib.suppress(Exception):
        await plaintext.__aexit__(None, None, None)
    wrong = EnvelopeProducer(
        bootstrap_servers=secure_broker.bootstrap, client_id="it-wrong",
        security=secure_broker.security("producer", password="not-the-password"),
    )  # fmt: skip
    with pytest.raises((KafkaConnectionError, KafkaError, asyncio.TimeoutError)):
        await asyncio.wait_for(wrong.__aenter__(), timeout=20)
    with contextlib.suppress(Exception):
        await wrong.__aexit__(None, None, None)


@pytest_asyncio.fixture(loop_scope="session")
async def preemption(
    secure_broker: SecureBroker, database_url: str, scratch_schema: str, tmp_path: Path
) -> AsyncIterator[tuple[ServiceProcess, str, str, int]]:
    """The real preemption service, connected as the `preemption` principal."""
    dsn = await _migrated(database_url, scratch_schema)
    run = uuid.uuid4().hex[:6]
    secret = "sec-" + uuid.uuid4().hex
    pool = f"P{run}"
    port = _free_port()
    env = os.environ | secure_broker.env_of("preemption") | {
        "DATABASE_URL": dsn,
        "GFS_COMMAND_SECRET": secret,
        "PREEMPTION_GROUP": f"gfs-preemption-it-{run}",
        "PREEMPTION_ROUTER_GROUP": f"gfs-preemption-it-router-{run}",
        "PREEMPTION_INBOX_TOPIC": f"gfs-preemption-it-inbox-{run}",
        "PREEMPTION_INBOX_PARTITIONS": "1",
        "PREEMPTION_API_PORT": str(port),
        "PREEMPTION_INSTANCE": f"sec-{run}",
        "PREEMPTION_POOLS": pool,
        "PREEMPTION_NODE_TIMEOUT_S": "600",
        "PYTHONUNBUFFERED": "1",
    }  # fmt: skip
    proc = ServiceProcess(["serve", "preemption"], env, tmp_path / "preemption.log").start()
    try:
        yield proc, secret, pool, port
    finally:
        proc.stop()


async def _dead_letters(broker: SecureBroker, until: float) -> AsyncIterator[DeadLetter]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        enable_auto_commit=False,
        **broker.security("admin").client_kwargs(),
    )
    await consumer.start()
    try:
        tp = TopicPartition(DEAD_LETTER_TOPIC, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        loop = asyncio.get_running_loop()
        while loop.time() < until:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for record in records:
                    yield decode(DEAD_LETTER_TOPIC, record.value or b"").payload
    finally:
        await consumer.stop()


@pytest.mark.asyncio(loop_scope="session")
async def test_an_agent_acking_for_another_node_is_refused_by_the_preemption_service(
    secure_broker: SecureBroker, preemption: tuple[ServiceProcess, str, str, int]
) -> None:
    proc, secret, pool, port = preemption
    # n2's own agent makes n2 known to the service (its heartbeat, signed with n2's key) ...
    samples = tuple(
        GpuSample(index=g, utilisation_pct=0, memory_used_mib=0, memory_total_mib=1) for g in range(2)
    )
    heartbeat = NodeTelemetry(node="n2", gpu_model=pool, sampled_at=datetime.now(UTC), gpus=samples)
    async with EnvelopeProducer(
        bootstrap_servers=secure_broker.bootstrap,
        client_id="it-agent-n2",
        security=secure_broker.security("agent-n2"),
    ) as n2:
        await n2.send(
            TELEMETRY_TOPIC, wrap(sign(heartbeat, key=node_key(secret.encode(), "n2")), producer="agent")
        )

    async def n2_known() -> bool:
        body = await _get(port, "/pools")
        return bool(body) and body["pools"].get(pool, {}).get("nodes") == 1

    # (the service has taken n2's heartbeat, so the ack below is routed to n2's pool, not parked
    # as coming from an unknown node)
    await _until(n2_known, 240, f"the service to know node n2 in {pool}; log:\n{proc.tail(30)}")
    # ... then n1's agent, which may write acks, acks in n2's name: it holds only its own key.
    forged = EvictAck(
        command_id=uuid.uuid4(), node="n2", task_ids=("victim",), outcome=EvictOutcome.KILLED,
        acked_at=datetime.now(UTC),
    )  # fmt: skip
    async with EnvelopeProducer(
        bootstrap_servers=secure_broker.bootstrap,
        client_id="it-agent-n1",
        security=secure_broker.security("agent-n1"),
    ) as n1:
        await n1.send(
            EVICT_ACK_TOPIC, wrap(sign(forged, key=node_key(secret.encode(), "n1")), producer="agent")
        )

    until = asyncio.get_running_loop().time() + 180
    found, seen = None, []
    async for letter in _dead_letters(secure_broker, until):
        seen.append(letter.error)
        if "EvictAck refused: not signed by node 'n2'" in letter.error:
            found = letter
            break
    assert found is not None, f"no dead letter for the forged ack (saw {seen}); log:\n{proc.tail(60)}"
    assert str(forged.command_id).encode() in base64.b64decode(found.original)
    log = proc.log.read_text(errors="replace")
    # The service says how it reaches Kafka (never the password) and refused the ack for its signature.
    assert "kafka transport: SASL_SSL, SCRAM-SHA-512 as preemption" in log
    assert secure_broker.env_of("preemption")["KAFKA_SASL_PASSWORD"] not in log
    assert "refused EvictAck" in log and "signature_mismatch" in log
