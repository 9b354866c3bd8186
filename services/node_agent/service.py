"""`gfs serve node-agent`: this node's command reader, the worker watcher, telemetry and /metrics.

The readers (the agent's consume loop: which partitions, from where, when offsets are committed)
are documented in services/node_agent/command_reader.py.
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
from opentelemetry.metrics import CallbackOptions, Observation

from gfs.services.node_agent.ack_delay import DelayedSink
from gfs.services.node_agent.agent import TRACER, AgentMetrics, NodeAgent
from gfs.services.node_agent.api_spec import API, Health
from gfs.services.node_agent.command_reader import (
    ClockReader,
    CommandReader,
    follow_clock,
    group_of,
    read_commands,
)
from gfs.services.node_agent.gpu import FakeGpuBackend, GpuBackend, NvmlBackend
from gfs.services.node_agent.journal import Journal
from gfs.services.node_agent.security import CommandGuard
from gfs.services.node_agent.settings import NodeAgentSettings
from gfs.services.node_agent.sim_clock import SimClock
from gfs.services.node_agent.worker_env import parse_allow, worker_environment
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.metrics import Metrics, configure_metrics, metrics_handler
from gfs.services.platform.openapi import add_openapi
from gfs.services.platform.timer import every, failure_counter

log = logging.getLogger(__name__)


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

    def fenced(_: CallbackOptions) -> list[Observation]:
        fence = agent.fence
        return [
            Observation(n, {"node": agent.node, "action": action})
            for action, n in (("frozen", fence.frozen), ("thawed", fence.thawed), ("killed", fence.killed))
        ]

    meter.create_observable_counter(
        "gfs_agent_fenced_workers", callbacks=[fenced],
        description="Workers the self-fence froze, thawed and killed (a cut from the broker: fence.py)",
    )  # fmt: skip
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
                previous_key=settings.previous_key(options.node),
                previous_until=settings.gfs_command_secret_previous_until,
                wall_clock=wall,
            )
            _log_rotation(options.node, guard)
            async with EnvelopeProducer(
                bootstrap_servers=settings.bootstrap_servers,
                client_id=group_of(options.node),
                security=settings.kafka_security,
                deployment=settings.gfs_deployment,
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
                gpu_model = options.gpu_model or backend.model
                fence_after_s = _fence_delay(settings, options, topic_clock=sim_clock is not None)
                agent = NodeAgent(
                    node=options.node,
                    backend=backend,
                    gpu_model=gpu_model,
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
                    fence_after_s=fence_after_s,
                    fence_thaw_within_s=settings.agent_fence_thaw_within_s,
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
                    security=settings.kafka_security,
                )
                await reader.start(wall())  # record timestamps are wall-clock ones
                if sim_clock is not None:
                    clock_reader = ClockReader(
                        servers=settings.bootstrap_servers, security=settings.kafka_security
                    )
                    await clock_reader.start()
                if started is not None:
                    started(agent)
                inner = asyncio.Event()
                jobs = [
                    asyncio.create_task(read_commands(reader, agent, producer, inner, now)),
                    asyncio.create_task(agent.watch(inner)),
                    asyncio.create_task(agent.fence.watch(inner)),
                    # A missed heartbeat is logged and counted; the next one may succeed.
                    asyncio.create_task(
                        every(
                            options.telemetry_s,
                            inner,
                            agent.publish_telemetry,
                            name="agent.telemetry",
                            failures=failure_counter(metrics.meter(TRACER)),
                        )
                    ),
                    asyncio.create_task(stop.wait()),
                ]
                if clock_reader is not None:
                    jobs.append(asyncio.create_task(follow_clock(clock_reader, agent, inner)))
                log.info(
                    "node agent %s ready (%d GPUs %s, journal %s, %s clock)",
                    options.node,
                    backend.count,
                    gpu_model,
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


def _fence_delay(settings: NodeAgentSettings, options: AgentOptions, *, topic_clock: bool) -> float:
    """AGENT_FENCE_AFTER_S, or 0 (off) where the fence cannot work: on the topic clock the service
    never declares a node lost (heartbeats do not time out there), and heartbeats rarer than half
    the delay would freeze the workers between two of them (fence.py)."""
    after_s = settings.agent_fence_after_s
    if after_s <= 0 or topic_clock:
        return 0.0
    if options.telemetry_s * 2 > after_s:
        log.warning(
            "self-fence off: heartbeats every %g s are too rare for AGENT_FENCE_AFTER_S=%g "
            "(at most half of it)", options.telemetry_s, after_s,
        )  # fmt: skip
        return 0.0
    return after_s


def _log_rotation(node: str, guard: CommandGuard) -> None:
    """Say at start-up whether a previous key is accepted, and until when (key_rotation.py)."""
    if guard.previous_key is None:
        return
    if guard.previous_until is None:
        log.warning(
            "node agent %s: a previous key is accepted with no end (GFS_COMMAND_SECRET_PREVIOUS_UNTIL "
            "unset): unset the previous key once the rotation is done", node,
        )  # fmt: skip
    else:
        log.warning(
            "node agent %s: commands signed with the previous key are accepted until %s (a rotation)",
            node, guard.previous_until.isoformat(),
        )  # fmt: skip
