"""The node agent's state and how it speaks: one journal, its children, and the signed acks it
publishes (in the trace of the command they answer).

The base of the agent's parts (workers.py, eviction.py, recovery.py, telemetry.py, agent.py), each
a class over this one; imports go one way, from `agent` down to here. Kafka-free: acks go to an
`AckSink` (`EnvelopeProducer` in the service, a list in unit tests).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from uuid import UUID

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.metrics import Counter, Histogram, Meter

from schemas.envelope import Envelope, wrap
from schemas.workers import WorkerExited, WorkerStarted
from services.node_agent.gpu import GpuBackend
from services.node_agent.journal import CommandEntry, Journal, WorkerEntry
from services.node_agent.security import CommandGuard
from services.node_agent.sim_clock import SimClock
from services.node_agent.worker_env import worker_environment
from services.platform.signing import sign
from services.platform.tracing import extract_context

PRODUCER = "gfs-node-agent"
TRACER = "gfs.node_agent"

# A re-adopted worker is not the new agent's child, so its exit status cannot be collected
# (only a parent may wait for it). Its WorkerExited carries this code and says so in `detail`.
UNKNOWN_EXIT_CODE = -1
UNKNOWN_EXIT_DETAIL = "exit status unknown: the worker was re-adopted after an agent restart"
NOT_STARTED_EXIT_CODE = 127  # the shell's "command not found" status, as WorkerExited documents
# The environment marker that finds a worker forked just before the agent died (see procs).
WORKER_MARKER = "GFS_AGENT_WORKER"
# What a worker learns of the controllable clock and of its restart (see `_start`).
SIM_ENV = ("GFS_SIM_CLOCK_FILE", "GFS_SIM_START", "GFS_CLOCK_SEEN_FILE")
# How often an ADVANCE looks at the workers' clock-seen files (a tick's latency is mostly this).

_LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def utc_now() -> datetime:
    return datetime.now(UTC)


class AckSink(Protocol):
    """Where acks and telemetry go (`EnvelopeProducer` in the service, a list in unit tests). The
    current OpenTelemetry context travels with each message (the producer injects it)."""

    async def send(self, topic_name: str, envelope: Envelope[Any]) -> object: ...


@dataclass(slots=True)
class AgentMetrics:
    rejected: Counter
    commands: Counter
    sigterm_latency: Histogram
    sigterm_since_issued: Histogram
    # Plain counts, for logs and tests (the OTel instruments are write-only).
    rejections: collections.Counter[str]

    @classmethod
    def create(cls, meter: Meter) -> AgentMetrics:
        return cls(
            rejected=meter.create_counter(
                "gfs_agent_commands_rejected", description="Commands refused by the node agent, by reason."
            ),
            commands=meter.create_counter(
                "gfs_agent_commands", description="Commands handled by the node agent, by kind and result."
            ),
            sigterm_latency=meter.create_histogram(
                "gfs_agent_sigterm_latency_seconds",
                unit="s",
                description="Eviction command received -> SIGTERM sent to its workers.",
                explicit_bucket_boundaries_advisory=_LATENCY_BUCKETS_S,
            ),
            sigterm_since_issued=meter.create_histogram(
                "gfs_agent_sigterm_since_issued_seconds",
                unit="s",
                description="Eviction command issued_at (scheduler clock) -> SIGTERM sent.",
                explicit_bucket_boundaries_advisory=_LATENCY_BUCKETS_S,
            ),
            rejections=collections.Counter(),
        )


class AgentBase:
    def __init__(
        self,
        *,
        node: str,
        backend: GpuBackend,
        gpu_model: str,
        journal: Journal,
        guard: CommandGuard,
        sink: AckSink,
        metrics: AgentMetrics,
        log_dir: Path,
        clock: Callable[[], datetime] = utc_now,
        watch_s: float = 0.05,
        kill_wait_s: float = 10.0,
        worker_env: dict[str, str] | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        wall_clock: Callable[[], datetime] | None = None,
        sim_clock: SimClock | None = None,
        checkpoint_root: Path | None = None,
        clock_wait_s: float = 30.0,
    ) -> None:
        """`clock` is the agent's time (acks, command freshness): the sim clock's `now` in topic
        mode. `wall_clock` (default: `clock`) stamps the heartbeats, which stay on real time.
        `checkpoint_root`: workers get GFS_CHECKPOINT_DIR=<root>/<task>/<worker> (None: the
        variable is left as the agent's environment has it)."""
        self.node = node
        self.backend = backend
        self.gpu_model = gpu_model
        self.journal = journal
        self.guard = guard
        self.sink = sink
        self.metrics = metrics
        self.log_dir = log_dir
        self.clock = clock
        self.wall_clock = wall_clock or clock
        self.sim_clock = sim_clock
        self.checkpoint_root = checkpoint_root
        self.clock_wait_s = clock_wait_s
        self.watch_s = watch_s
        self.kill_wait_s = kill_wait_s
        # The base environment of workers (default: the allowed part of the agent's own, never a
        # key or the database URL: worker_env.py).
        self.worker_env = worker_environment(os.environ) if worker_env is None else dict(worker_env)
        self.tracer = trace.get_tracer(TRACER, tracer_provider=tracer_provider)
        self._children: dict[str, Any] = {}  # worker key -> subprocess.Popen (our own children)
        self._exited: dict[str, asyncio.Event] = {}
        self.evictions: dict[UUID, asyncio.Task[None]] = {}
        self._last_prune = clock()
        # The watcher and a clock tick both reap and report exits; one at a time, so an exit is
        # published once and a tick's reap waits for the watcher's publishes in flight.
        self._polling = asyncio.Lock()

    # What the agent says: signed acks, in the trace of the command they answer ------------------

    def _started(self, worker: WorkerEntry) -> WorkerStarted:
        assert worker.pid is not None and worker.started_at is not None
        return WorkerStarted(
            command_id=worker.command_id,
            node=self.node,
            task_id=worker.task_id,
            worker_index=worker.worker_index,
            pid=worker.pid,
            started_at=worker.started_at,
            attempt=worker.attempt,
        )

    def _exited_ack(self, worker: WorkerEntry) -> WorkerExited:
        assert worker.exited_at is not None and worker.exit_code is not None
        return WorkerExited(
            command_id=worker.command_id,
            node=self.node,
            task_id=worker.task_id,
            worker_index=worker.worker_index,
            exit_code=worker.exit_code,
            exited_at=worker.exited_at,
            evicted=worker.evicting_command is not None,
            detail=worker.exit_detail,
            attempt=worker.attempt,
        )

    @contextlib.contextmanager
    def _in_trace_of(self, entry: CommandEntry | None) -> Any:
        """Continue the trace the command arrived with (stored in the journal)."""
        if entry is None or not entry.trace_headers:
            yield
            return
        carried = [(name, value.encode("utf-8")) for name, value in entry.trace_headers]
        token = otel_context.attach(extract_context(carried))
        try:
            yield
        finally:
            otel_context.detach(token)

    async def _publish(self, topic_name: str, payload: Any, entry: CommandEntry | None) -> None:
        # Inside the command's span when called from `handle` (the current context); otherwise
        # (watcher, recovery) the command's stored trace headers give the parent.
        current = trace.get_current_span().get_span_context()
        parent = contextlib.nullcontext() if current.is_valid else self._in_trace_of(entry)
        with (
            parent,
            self.tracer.start_as_current_span(
                f"agent.publish {type(payload).__name__}", kind=trace.SpanKind.PRODUCER
            ),
        ):
            signed = sign(payload, key=self.guard.key)  # the scheduler applies only its node's word
            await self.sink.send(topic_name, wrap(signed, producer=PRODUCER, occurred_at=self.clock()))
