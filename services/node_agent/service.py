"""`gfs serve node-agent`: this node's command reader, the worker watcher, telemetry and /metrics.

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
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from aiohttp import web
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.partitioner import DefaultPartitioner
from opentelemetry import trace
from opentelemetry.metrics import CallbackOptions, Observation

from schemas.clock import ClockTick
from schemas.topics import DEAD_LETTER_TOPIC, decode, topic
from services.node_agent.ack_delay import DelayedSink
from services.node_agent.agent import PRODUCER, TRACER, AgentMetrics, NodeAgent
from services.node_agent.api_spec import API, Health
from services.node_agent.gpu import FakeGpuBackend, GpuBackend, NvmlBackend
from services.node_agent.journal import Journal
from services.node_agent.security import CommandGuard, Rejection
from services.node_agent.settings import NodeAgentSettings
from services.node_agent.sim_clock import SimClock
from services.node_agent.worker_env import parse_allow, worker_environment
from services.platform.kafka.dead_letter import FailedRecord, build_dead_letter, describe_error
from services.platform.kafka.producer import EnvelopeProducer
from services.platform.metrics import Metrics, configure_metrics, metrics_handler
from services.platform.openapi import add_openapi
from services.platform.tracing import extract_context

log = logging.getLogger(__name__)

COMMAND_TOPICS = ("gfs.commands.bind", "gfs.commands.evict")
CLOCK_TOPIC = "gfs.control.clock"
_HANDLER_ATTEMPTS = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentOptions:
    """What `gfs serve node-agent` takes on its command line."""

    node: str
    gpu_model: str | None = None
    gpus: int | None = None
    fake_gpus: bool = False
    telemetry_s: float = 5.0
    state_dir: Path | None = None
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"


def default_node_name() -> str:
    return socket.gethostname()


def group_of(node: str) -> str:
    return f"gfs-agent-{node}"


def build_backend(options: AgentOptions) -> GpuBackend:
    if options.fake_gpus:
        return FakeGpuBackend(options.gpu_model or "FAKE-GPU", options.gpus or 8)
    return NvmlBackend()


@contextlib.contextmanager
def _state_lock(state_dir: Path) -> Iterator[None]:
    """One agent per journal: a second agent on the same state dir would double-act. flock is
    released by the kernel when the holder dies, even by kill -9."""
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"another node agent holds {state_dir} (its lock file)") from None
        yield
    finally:
        os.close(fd)


class CommandReader:
    """This node's partitions of the command topics, positioned and committed as documented above."""

    def __init__(self, *, node: str, servers: list[str], max_age_s: float) -> None:
        self.node = node
        self.key = node.encode("utf-8")
        self.servers = servers
        self.max_age_s = max_age_s
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=servers,
            group_id=group_of(node),
            enable_auto_commit=False,
            auto_offset_reset="latest",  # never reached for a fresh group: see `start`
            isolation_level="read_committed",
        )

    async def partitions(self) -> list[TopicPartition]:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.servers)
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

    def __init__(self, *, servers: list[str]) -> None:
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=servers, enable_auto_commit=False, isolation_level="read_committed"
        )
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


async def _follow_clock(reader: ClockReader, agent: NodeAgent, stop: asyncio.Event) -> None:
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


async def _read_commands(
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
            failed = FailedRecord(
                topic=record.topic,
                partition=record.partition,
                offset=record.offset,
                value=record.value,
                consumer_group=group_of(agent.node),
            )
            await producer.send(
                DEAD_LETTER_TOPIC,
                build_dead_letter(failed, error=exc, failed_at=received_at, producer=PRODUCER),
            )
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


async def _telemetry(agent: NodeAgent, every_s: float, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await agent.publish_telemetry()
        except Exception as exc:  # a missed heartbeat is logged, the next one may succeed
            log.warning("telemetry not published: %r", exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=every_s)


def build_metrics_app(metrics: Metrics) -> web.Application:
    """What --metrics-port serves: /metrics, and /healthz for the kubelet's probes (infra/k8s);
    its contract (api_spec.py) at /openapi.json."""

    async def healthz(request: web.Request) -> web.Response:
        API.query(request)  # none taken: 400 for any
        return web.json_response(Health(status="alive").model_dump())

    app = web.Application()
    app.router.add_get("/metrics", metrics_handler(metrics))
    app.router.add_get("/healthz", healthz)
    add_openapi(app, API)
    return app


def _observe(agent: NodeAgent, metrics: Metrics) -> None:
    meter = metrics.meter(TRACER)

    def running(_: CallbackOptions) -> list[Observation]:
        return [Observation(len(agent.journal.live_workers()), {"node": agent.node})]

    def evicting(_: CallbackOptions) -> list[Observation]:
        return [Observation(len(agent.evictions), {"node": agent.node})]

    meter.create_observable_gauge(
        "gfs_agent_workers_running", callbacks=[running], description="Workers of this node alive now"
    )
    meter.create_observable_gauge(
        "gfs_agent_evictions_in_progress", callbacks=[evicting],
        description="Eviction commands whose workers are still stopping (SIGTERM sent, grace running)",
    )  # fmt: skip


async def run_node_agent(
    settings: NodeAgentSettings,
    options: AgentOptions,
    stop: asyncio.Event,
    *,
    clock: Callable[[], datetime] | None = None,
    ready: asyncio.Event | None = None,
    started: Callable[[NodeAgent], None] | None = None,
    metrics: Metrics | None = None,
) -> None:
    """Run the agent until `stop`. Raises `MissingKeyError` before touching anything when no key
    is configured. Workers keep running when the agent stops (a restart re-adopts them)."""
    wall: Callable[[], datetime] = clock or (lambda: datetime.now(UTC))
    settings = settings.own_key_only(options.node)  # the master secret, if given, is not kept
    key = settings.command_key(options.node)
    state_dir = options.state_dir or settings.state_dir(options.node)
    sim_clock = (
        SimClock(state_dir, wall, settings.agent_clock_name) if settings.agent_clock == "topic" else None
    )
    # The agent's time (acks, command freshness): the ticks' in topic mode, else the wall clock.
    now = sim_clock.now if sim_clock is not None else wall
    own_metrics = metrics is None
    metrics = metrics or configure_metrics(settings.otel_service_name or "gfs-node-agent")
    runner: web.AppRunner | None = None
    clock_reader: ClockReader | None = None
    backend = build_backend(options)
    try:
        with _state_lock(state_dir):
            journal = Journal.open(state_dir / "journal.json", node=options.node)
            guard = CommandGuard(
                node=options.node,
                key=key,
                max_age=timedelta(seconds=settings.agent_command_max_age_s),
                clock_skew=timedelta(seconds=settings.agent_clock_skew_s),
            )
            async with EnvelopeProducer(
                bootstrap_servers=settings.bootstrap_servers, client_id=group_of(options.node)
            ) as producer:
                delayed = (
                    DelayedSink(
                        producer,
                        max_delay_s=settings.agent_ack_delay_max_s,
                        seed=settings.agent_ack_delay_seed,
                        node=options.node,
                    )
                    if settings.agent_ack_delay_max_s > 0
                    else None
                )
                if delayed is not None:
                    log.warning(
                        "acks delayed at random by up to %.3f s (AGENT_ACK_DELAY_MAX_S): tests, benches only",
                        settings.agent_ack_delay_max_s,
                    )
                agent = NodeAgent(
                    node=options.node,
                    backend=backend,
                    gpu_model=options.gpu_model or backend.model,
                    journal=journal,
                    guard=guard,
                    sink=delayed or producer,
                    metrics=AgentMetrics.create(metrics.meter(TRACER)),
                    log_dir=state_dir / "logs",
                    clock=now,
                    wall_clock=wall,
                    watch_s=settings.agent_watch_s,
                    kill_wait_s=settings.agent_kill_wait_s,
                    sim_clock=sim_clock,
                    checkpoint_root=settings.checkpoint_root(state_dir),
                    clock_wait_s=settings.agent_clock_wait_s,
                    worker_env=worker_environment(os.environ, parse_allow(settings.agent_worker_env_allow)),
                )
                _observe(agent, metrics)
                if options.metrics_port:
                    runner = web.AppRunner(build_metrics_app(metrics))
                    await runner.setup()
                    await web.TCPSite(runner, options.metrics_host, options.metrics_port).start()
                await agent.recover()
                reader = CommandReader(
                    node=options.node,
                    servers=settings.bootstrap_servers,
                    max_age_s=settings.agent_command_max_age_s,
                )
                await reader.start(wall())  # record timestamps are wall-clock ones
                if sim_clock is not None:
                    clock_reader = ClockReader(servers=settings.bootstrap_servers)
                    await clock_reader.start()
                if started is not None:
                    started(agent)
                inner = asyncio.Event()
                jobs = [
                    asyncio.create_task(_read_commands(reader, agent, producer, inner, now)),
                    asyncio.create_task(agent.watch(inner)),
                    asyncio.create_task(_telemetry(agent, options.telemetry_s, inner)),
                    asyncio.create_task(stop.wait()),
                ]
                if clock_reader is not None:
                    jobs.append(asyncio.create_task(_follow_clock(clock_reader, agent, inner)))
                log.info(
                    "node agent %s ready (%d GPUs %s, journal %s, %s clock)",
                    options.node,
                    backend.count,
                    agent.gpu_model,
                    journal.path,
                    settings.agent_clock,
                )
                if ready is not None:
                    ready.set()
                try:
                    done, _ = await asyncio.wait(jobs, return_when=asyncio.FIRST_COMPLETED)
                    for job in done:
                        if (error := job.exception()) is not None:
                            raise error
                finally:
                    inner.set()
                    # Evictions in their grace period are cut short here; they stay "accepted" in
                    # the journal and resume on the next start.
                    tasks = [*jobs, *agent.evictions.values()]
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
                    if delayed is not None:
                        await delayed.close()
                    await reader.stop()
    finally:
        backend.close()
        if runner is not None:
            await runner.cleanup()
        if own_metrics:
            metrics.shutdown()
        if clock_reader is not None:
            await clock_reader.stop()
