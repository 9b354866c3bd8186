"""Authenticated transport on a real secured broker (issue 25, item 2).

`infra/kafka/secure.sh` starts, for this module only, a single broker with a SASL_SSL listener
(TLS from a throwaway CA, SCRAM-SHA-512 users), StandardAuthorizer and the ACL table of
services/platform/kafka/acls.py, in a folder and on ports of its own: the shared plaintext broker
on 9092 is never touched. Every client here connects as one principal, through the same
`KafkaSecurity` settings the services use (KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_*, KAFKA_SSL_CAFILE).

Checked, with hand-worked expectations (the ACL table's rows, not the broker's answers, say what
must pass):
- a TaskSubmitted from an agent's principal is refused by the broker (TopicAuthorizationFailed)
  and nothing reaches the topic;
- a signed EvictCommand and BindCommand from a producer's principal are refused the same way;
- an agent's principal acking for another node passes the broker (it may write acks) but the real
  preemption service, connected as `preemption`, refuses it by its node signature and
  dead-letters it;
- the allowed path: `producer` submits, a consumer group of `preemption` reads the submission;
- a client without TLS/SASL, or with a wrong password, gets nothing;
- the other clients, each as its own principal: `GfsClient` submits as `producer` (refused as
  `agent-n1`, KafkaAccessDeniedError), a real node agent takes a signed bind as `agent-n1` and acks
  it, the real quota service turns a status and a forecast into the hand-worked quota as `quota`,
  the forecast worker creates its internal topic as `forecast`, and `gfs stack smoke` and
  `gfs deadletter`'s reader work as `admin`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import os
import random
import shlex
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError, TopicAuthorizationFailedError
from live_harness import REPO, ServiceProcess
from opentelemetry.sdk.trace import TracerProvider
from payload_examples import task_submitted
from pydantic import SecretStr
from rich.console import Console
from test_live_cluster import _get, _until
from test_quota_service import _free_port, _hour, _migrated

from schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome
from schemas.dead_letter import DeadLetter
from schemas.envelope import Envelope, wrap
from schemas.forecast import PoolDemandForecast
from schemas.pool_status import PoolStatus
from schemas.quota import SpotQuota
from schemas.tasks import EvictionReason, Placement, TaskClass
from schemas.telemetry import GpuSample, NodeTelemetry
from schemas.topics import (
    BIND_TOPIC,
    DEAD_LETTER_TOPIC,
    EVICT_ACK_TOPIC,
    EVICT_TOPIC,
    FORECASTS_TOPIC,
    POOL_STATUS_TOPIC,
    QUOTAS_TOPIC,
    TASK_SUBMIT_TOPIC,
    TELEMETRY_TOPIC,
    WORKER_ACK_TOPIC,
    decode,
    topic,
)
from schemas.workers import WorkerExited, WorkerStarted
from services.forecast.app import ForecastServiceSettings, _declare_internal_topic
from services.node_agent.service import AgentOptions, run_node_agent
from services.node_agent.settings import NodeAgentSettings
from services.platform.deadletter_cli import read_letters
from services.platform.kafka.consumer import consume
from services.platform.kafka.processing import MessageContext
from services.platform.kafka.producer import EnvelopeProducer
from services.platform.kafka_security import KafkaSecurity
from services.platform.signing import node_key, sign
from services.platform.smoke import run_smoke
from services.producers.client import GfsClient, KafkaAccessDeniedError, TaskState
from services.quota.service import QuotaServiceSettings, run_quota_service

pytestmark = pytest.mark.integration

SECURE_SH = REPO / "infra" / "kafka" / "secure.sh"
AGENTS = ("n1", "n2")


@dataclass(frozen=True, slots=True)
class SecureBroker:
    """The broker of `infra/kafka/secure.sh`, in a folder and on ports of its own."""

    folder: Path
    port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def script(self, *args: str, timeout: float = 900.0) -> str:
        env = os.environ | {
            "KAFKA_SECURE_DIR": str(self.folder),
            "KAFKA_SECURE_PORT": str(self.port),
            "KAFKA_SECURE_AGENTS": " ".join(AGENTS),
            # A loaded CI machine may take minutes to start a JVM broker (the script's default: 120 s).
            "KAFKA_WAIT_TIMEOUT": os.environ.get("KAFKA_WAIT_TIMEOUT", "300"),
        }
        done = subprocess.run(
            ["bash", str(SECURE_SH), *args], env=env, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, f"secure.sh {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def env_of(self, principal: str) -> dict[str, str]:
        """The client exports `secure.sh env PRINCIPAL` prints (what a service's env would hold)."""
        out: dict[str, str] = {}
        for line in self.script("env", principal).splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            out[name] = shlex.split(value)[0] if value else ""
        return out

    def security(self, principal: str, *, password: str | None = None) -> KafkaSecurity:
        env = self.env_of(principal)
        return KafkaSecurity(
            protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            username=env["KAFKA_SASL_USERNAME"],
            password=SecretStr(password or env["KAFKA_SASL_PASSWORD"]),
            cafile=env["KAFKA_SSL_CAFILE"],
        )


def _free_port_pair() -> int:
    """A port P with P and P+1 free, below the kernel's ephemeral range (as test_scale_out)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(50):
        base = rng.randrange(20_000, min(low, 32_768) - 10)
        try:
            for port in (base, base + 1):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no two free ports for the secured broker")


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    """Starts the secured broker for this module, stops and wipes it after."""
    broker = SecureBroker(tmp_path_factory.mktemp("kafka-secure"), _free_port_pair())
    try:
        broker.script("up")
        yield broker
    finally:
        with contextlib.suppress(Exception):
            broker.script("reset")


async def _end_offsets(broker: SecureBroker, topic_name: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        enable_auto_commit=False,
        **broker.security("admin").client_kwargs(),
    )
    await consumer.start()
    try:
        parts = [TopicPartition(topic_name, p) for p in range(topic(topic_name).partitions)]
        ends = await consumer.end_offsets(parts)
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()


async def _send_refused(
    broker: SecureBroker, principal: str, topic_name: str, envelope: Envelope[Any]
) -> None:
    before = await _end_offsets(broker, topic_name)
    async with EnvelopeProducer(
        bootstrap_servers=broker.bootstrap, client_id=f"it-{principal}", security=broker.security(principal)
    ) as producer:
        with pytest.raises(TopicAuthorizationFailedError):
            await asyncio.wait_for(producer.send(topic_name, envelope), timeout=60)
    assert await _end_offsets(broker, topic_name) == before, f"{principal} wrote to {topic_name}"


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


# -- the rest of the clients: producer client, node agent, quota service, forecast stream --------
# Each connects with the `KafkaSecurity` its settings describe (env KAFKA_SECURITY_PROTOCOL,
# KAFKA_SASL_*, KAFKA_SSL_CAFILE, as `secure.sh env PRINCIPAL` prints them); on main they dialled
# the SASL_SSL listener in plaintext whatever the settings, and got nothing.


def _settings_env(broker: SecureBroker, principal: str) -> dict[str, Any]:
    """A principal's client env as settings keyword arguments (the field names, lower-cased)."""
    return {name.lower(): value for name, value in broker.env_of(principal).items()}


async def _records_after(
    broker: SecureBroker,
    topic_name: str,
    since: dict[int, int],
    done: Callable[[list[Envelope[Any]]], bool],
    timeout_s: float = 90.0,
) -> list[Envelope[Any]]:
    """The envelopes written on `topic_name` after the offsets `since`, read as `admin`, until
    `done` says enough or the time is up."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        enable_auto_commit=False,
        **broker.security("admin").client_kwargs(),
    )
    await consumer.start()
    found: list[Envelope[Any]] = []
    try:
        parts = [TopicPartition(topic_name, p) for p in since]
        consumer.assign(parts)
        for tp in parts:
            consumer.seek(tp, since[tp.partition])
        until = asyncio.get_running_loop().time() + timeout_s
        while not done(found) and asyncio.get_running_loop().time() < until:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                found += [decode(topic_name, record.value or b"") for record in records]
    finally:
        await consumer.stop()
    return found


@pytest.mark.asyncio(loop_scope="session")
async def test_the_producer_client_submits_as_producer_and_is_refused_as_an_agent(
    secure_broker: SecureBroker,
) -> None:
    task = task_submitted(f"sec-client-{uuid.uuid4().hex[:8]}")
    before = await _end_offsets(secure_broker, TASK_SUBMIT_TOPIC)
    async with GfsClient(
        bootstrap_servers=secure_broker.bootstrap, producer_name="it-client",
        security=secure_broker.security("producer"),
    ) as gfs:  # fmt: skip
        await gfs.submit(task)
        # status() reads the lifecycle topic (the producer's Read row): nothing came back yet.
        assert await asyncio.wait_for(gfs.status(task.task_id), timeout=60) is TaskState.SUBMITTED
    written = await _records_after(
        secure_broker, TASK_SUBMIT_TOPIC, before,
        lambda found: any(getattr(e.payload, "task_id", None) == task.task_id for e in found),
    )  # fmt: skip
    assert [e.payload.task_id for e in written] == [task.task_id]

    # An agent's principal may not submit: a clear refusal, and nothing reaches the topic.
    before = await _end_offsets(secure_broker, TASK_SUBMIT_TOPIC)
    intruder = task_submitted(f"sec-client-agent-{uuid.uuid4().hex[:8]}")
    async with GfsClient(
        bootstrap_servers=secure_broker.bootstrap, producer_name="it-client",
        security=secure_broker.security("agent-n1"),
    ) as gfs:  # fmt: skip
        with pytest.raises(KafkaAccessDeniedError, match="principal agent-n1 may not write"):
            await gfs.submit(intruder)
    assert await _end_offsets(secure_broker, TASK_SUBMIT_TOPIC) == before


@pytest.mark.asyncio(loop_scope="session")
async def test_the_node_agent_takes_a_command_over_sasl_ssl_as_its_own_principal(
    secure_broker: SecureBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # n1: the agent principal `agent-n1` may join only group gfs-agent-n1 (the ACL table's row).
    secret = "sec-agent-" + uuid.uuid4().hex
    settings = NodeAgentSettings(
        **_settings_env(secure_broker, "agent-n1"),
        gfs_command_secret=secret, agent_state_root=tmp_path, agent_kill_wait_s=5.0,
    )  # fmt: skip
    options = AgentOptions(
        node="n1", gpu_model="IT-GPU", gpus=2, fake_gpus=True, telemetry_s=1.0, state_dir=tmp_path / "n1"
    )
    acks_from = await _end_offsets(secure_broker, WORKER_ACK_TOPIC)
    stop, ready = asyncio.Event(), asyncio.Event()
    agent = asyncio.create_task(run_node_agent(settings, options, stop, ready=ready))
    try:
        waiter = asyncio.create_task(ready.wait())
        await asyncio.wait([agent, waiter], timeout=120, return_when=asyncio.FIRST_COMPLETED)
        if agent.done():
            agent.result()  # the agent's start-up error
        assert ready.is_set(), "the agent did not become ready on the secured broker"
        task_id = f"sec-bind-{uuid.uuid4().hex[:8]}"
        bind = BindCommand(
            command_id=uuid.uuid4(), node="n1", task_id=task_id, task_class=TaskClass.SPOT,
            placements=(Placement(worker_index=0, node="n1", gpu_indices=(0,)),),
            command=(sys.executable, "-m", "services.node_agent.fake_task", "--duration", "0.5"),
            issued_at=datetime.now(UTC),
        )  # fmt: skip
        # Only the preemption service's principal may write commands.
        async with EnvelopeProducer(
            bootstrap_servers=secure_broker.bootstrap, client_id="it-preemption",
            security=secure_broker.security("preemption"),
        ) as commands:  # fmt: skip
            await commands.send(
                BIND_TOPIC, wrap(sign(bind, key=node_key(secret.encode(), "n1")), producer="preemption")
            )

        def exited(found: list[Envelope[Any]]) -> bool:
            return any(isinstance(e.payload, WorkerExited) and e.payload.task_id == task_id for e in found)

        acks = await _records_after(secure_broker, WORKER_ACK_TOPIC, acks_from, exited)
        # The agent read the bind (its partition, its group), ran the worker and acked both ends of
        # it on the worker-ack topic, all as `agent-n1`.
        mine = [type(e.payload) for e in acks if getattr(e.payload, "task_id", None) == task_id]
        assert mine == [WorkerStarted, WorkerExited], f"acks for {task_id}: {acks}"
    finally:
        stop.set()
        await asyncio.wait_for(agent, 60)
    assert secure_broker.env_of("agent-n1")["KAFKA_SASL_PASSWORD"] not in caplog.text


@pytest.mark.asyncio(loop_scope="session")
async def test_the_quota_service_reads_its_inputs_and_writes_quotas_as_quota(
    secure_broker: SecureBroker, database_url: str, scratch_schema: str
) -> None:
    dsn = await _migrated(database_url, scratch_schema)
    pool = f"Q{uuid.uuid4().hex[:8]}"
    settings = QuotaServiceSettings(
        **_settings_env(secure_broker, "quota"),
        database_url=dsn, quota_refresh_s=0.3, quota_api_port=0, quota_fence_poll_s=0.2,
        quota_fence_key=random.getrandbits(48),
        quota_group=f"gfs-quota-it-{uuid.uuid4().hex[:8]}",  # under quota's group prefix (ACLs)
    )  # fmt: skip
    quotas_from = await _end_offsets(secure_broker, QUOTAS_TOPIC)
    stop, ready = asyncio.Event(), asyncio.Event()
    service = asyncio.create_task(run_quota_service(settings, stop, ready=ready))
    try:
        waiter = asyncio.create_task(ready.wait())
        await asyncio.wait([service, waiter], timeout=120, return_when=asyncio.FIRST_COMPLETED)
        if service.done():
            service.result()
        assert ready.is_set(), "the quota service did not become ready on the secured broker"
        now = datetime.now(UTC)
        # The inputs from their writers' principals: the status from preemption, the forecast
        # from forecast (the values and the quota below are those of test_quota_service's
        # hand-worked case).
        status = PoolStatus(
            pool=pool, observed_at=now, capacity_gpus=100, idle_gpus=30, spot_in_use_gpus=10.0,
            hp_running_gpus=50.0, hp_queued_gpus=5.0,
        )  # fmt: skip
        forecast = PoolDemandForecast(
            pool=pool, origin_time=now.replace(minute=0, second=0, microsecond=0), tenants=2,
            model_name="lstm", model_version=f"it-{pool}",
            horizon=tuple(_hour(h, q) for h, q in ((1, 40.5), (2, 60.0), (3, 10.0), (4, 10.0))),
        )  # fmt: skip
        for principal, topic_name, payload in (
            ("preemption", POOL_STATUS_TOPIC, status),
            ("forecast", FORECASTS_TOPIC, forecast),
        ):
            async with EnvelopeProducer(
                bootstrap_servers=secure_broker.bootstrap, client_id=f"it-{principal}",
                security=secure_broker.security(principal),
            ) as producer:  # fmt: skip
                await producer.send(topic_name, wrap(payload, producer=f"it-{principal}"))

        def with_forecast(found: list[Envelope[Any]]) -> bool:
            return any(
                isinstance(e.payload, SpotQuota) and e.payload.pool == pool
                and f"it-{pool}" in e.payload.forecast_version
                for e in found
            )  # fmt: skip

        quotas = await _records_after(secure_broker, QUOTAS_TOPIC, quotas_from, with_forecast)
        assert with_forecast(quotas), f"no quota for {pool} from the quota service: {quotas}"
        quota = next(e.payload for e in quotas if isinstance(e.payload, SpotQuota) and e.payload.pool == pool
                     and f"it-{pool}" in e.payload.forecast_version)  # fmt: skip
        # Floor 50 + 5 = 55 over q90 [40.5, 60, 10, 10]: spare [45, 40, 45, 45], eta 1.
        assert {q.guarantee_hours: q.quota_gpus for q in quota.quotas} == {1: 45.0, 2: 40.0, 4: 40.0}
    finally:
        stop.set()
        await asyncio.wait_for(service, 60)


@pytest.mark.asyncio(loop_scope="session")
async def test_the_forecast_stream_creates_its_internal_topic_as_forecast(
    secure_broker: SecureBroker, tmp_path: Path
) -> None:
    # The worker's first Kafka call (before Faust starts): with the forecast principal, which may
    # create topics under its app id's prefix. Faust's own clients: tests/unit/services.
    app_id = f"gfs-forecast-it-{uuid.uuid4().hex[:8]}"
    settings = ForecastServiceSettings(
        **_settings_env(secure_broker, "forecast"),
        forecast_app_id=app_id, forecast_artifact=None, forecast_datadir=tmp_path,
    )  # fmt: skip
    await asyncio.wait_for(_declare_internal_topic(settings), timeout=90)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=secure_broker.bootstrap, **secure_broker.security("admin").client_kwargs()
    )
    await consumer.start()
    try:
        assert f"{app_id}-demand-by-pool" in await consumer.topics()
    finally:
        await consumer.stop()


@pytest.mark.asyncio(loop_scope="session")
async def test_the_operator_tools_smoke_and_deadletter_work_as_admin(secure_broker: SecureBroker) -> None:
    # `gfs stack smoke` and `gfs deadletter` are operator tools: on a secured broker, `admin`.
    admin = secure_broker.security("admin")
    buffer = io.StringIO()
    report = await run_smoke(
        bootstrap_servers=secure_broker.bootstrap, tasks=4, tracer=TracerProvider().get_tracer("it"),
        console=Console(file=buffer, width=200), timeout_s=90.0, security=admin,
    )  # fmt: skip
    assert report.failures() == (), buffer.getvalue()
    assert (report.sent, report.handled) == (4, 4) and report.dead_letter_at is not None
    # The smoke's malformed record, dead-lettered above, is what `gfs deadletter list` reads back.
    letters = await asyncio.wait_for(read_letters(secure_broker.bootstrap, admin), timeout=90)
    assert (report.dead_letter_at[0], report.dead_letter_at[1]) in {(i.partition, i.offset) for i in letters}
