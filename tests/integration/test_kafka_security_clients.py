"""Every client of the secured broker connects as its own principal (issue 25, item 2), on the real
SASL_SSL broker of `infra/kafka/secure.sh` (secure_broker.py; the session fixture `secure_broker`,
shared with test_kafka_security_acls.py).

Each connects with the `KafkaSecurity` its settings describe (env KAFKA_SECURITY_PROTOCOL,
KAFKA_SASL_*, KAFKA_SSL_CAFILE, as `secure.sh env PRINCIPAL` prints them); on main they dialled the
SASL_SSL listener in plaintext whatever the settings, and got nothing. `GfsClient` submits as
`producer` (refused as `agent-n1`, KafkaAccessDeniedError), a real node agent takes a signed bind
as `agent-n1` and acks it, the real quota service turns a status and a forecast into the
hand-worked quota as `quota`, the forecast worker creates its internal topic as `forecast`, and
`gfs stack smoke` and `gfs deadletter`'s reader work as `admin`.
"""

from __future__ import annotations

import asyncio
import io
import random
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from opentelemetry.sdk.trace import TracerProvider
from payload_examples import task_submitted
from quota_harness import _hour, _migrated
from rich.console import Console
from secure_broker import SecureBroker, end_offsets

from gfs.schemas.commands import BindCommand
from gfs.schemas.envelope import Envelope, wrap
from gfs.schemas.forecast import PoolDemandForecast
from gfs.schemas.pool_status import PoolStatus
from gfs.schemas.quota import SpotQuota
from gfs.schemas.tasks import Placement, TaskClass
from gfs.schemas.topics import (
    BIND_TOPIC,
    FORECASTS_TOPIC,
    POOL_STATUS_TOPIC,
    QUOTAS_TOPIC,
    TASK_SUBMIT_TOPIC,
    WORKER_ACK_TOPIC,
    decode,
)
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.forecast.app import TABLES
from gfs.services.forecast.settings import ForecastServiceSettings
from gfs.services.forecast.worker import declare_internal_topics
from gfs.services.node_agent.service import AgentOptions, run_node_agent
from gfs.services.node_agent.settings import NodeAgentSettings
from gfs.services.platform.deadletter_cli import read_letters
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.signing import node_key, sign
from gfs.services.platform.smoke import run_smoke
from gfs.services.producers.client import GfsClient, KafkaAccessDeniedError, TaskState
from gfs.services.quota.service import QuotaServiceSettings, run_quota_service

pytestmark = pytest.mark.integration


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
    before = await end_offsets(secure_broker, TASK_SUBMIT_TOPIC)
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
    before = await end_offsets(secure_broker, TASK_SUBMIT_TOPIC)
    intruder = task_submitted(f"sec-client-agent-{uuid.uuid4().hex[:8]}")
    async with GfsClient(
        bootstrap_servers=secure_broker.bootstrap, producer_name="it-client",
        security=secure_broker.security("agent-n1"),
    ) as gfs:  # fmt: skip
        with pytest.raises(KafkaAccessDeniedError, match="principal agent-n1 may not write"):
            await gfs.submit(intruder)
    assert await end_offsets(secure_broker, TASK_SUBMIT_TOPIC) == before


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
    acks_from = await end_offsets(secure_broker, WORKER_ACK_TOPIC)
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
            command=(sys.executable, "-m", "gfs.services.node_agent.fake_task", "--duration", "0.5"),
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
    quotas_from = await end_offsets(secure_broker, QUOTAS_TOPIC)
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
async def test_the_forecast_stream_creates_its_internal_topics_as_forecast(
    secure_broker: SecureBroker, tmp_path: Path
) -> None:
    # The worker's first Kafka call (before Faust starts): with the forecast principal, which may
    # create topics under its app id's prefix. Faust's own clients: tests/unit/services.
    app_id = f"gfs-forecast-it-{uuid.uuid4().hex[:8]}"
    settings = ForecastServiceSettings(
        **_settings_env(secure_broker, "forecast"),
        forecast_app_id=app_id, forecast_artifact=None, forecast_datadir=tmp_path,
    )  # fmt: skip
    await asyncio.wait_for(declare_internal_topics(settings), timeout=90)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=secure_broker.bootstrap, **secure_broker.security("admin").client_kwargs()
    )
    await consumer.start()
    try:
        topics = await consumer.topics()
        assert f"{app_id}-demand-by-pool" in topics
        assert {f"{app_id}-{t}-changelog" for t in TABLES} <= topics, topics
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
