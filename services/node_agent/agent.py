"""The node agent's core: verify a command, act on it, journal it, acknowledge it.

Kafka-free (acks go to an `AckSink`, the consumer loop lives in `service`), so the behaviour is
unit-tested with real processes and a recording sink. Everything runs on one event loop; the
journal is saved synchronously (an fsync is ~1 ms) before anything that relies on it.

Order of effects, and what a crash at any point leads to:
- Bind: journal the command and its workers as "starting" -> fork each worker -> journal the pids
  -> publish WorkerStarted -> (the caller commits the offset). A crash before the commit redelivers
  the command; its id is in the journal, so it is answered again, not started twice. A crash
  between fork and journaling the pid is covered by a marker in the worker's environment.
- Evict: SIGTERM first (the latency that matters), then journal the command as accepted (the
  caller commits the offset), then wait out the grace period in a task of its own, SIGKILL what
  is left, journal the ack and publish it. After a restart an accepted eviction is resumed with
  the grace deadline it had; an ack journaled but not yet published is published.
- Exit: the watcher sees a worker end, journals it, then publishes WorkerExited.
- Clock tick (topic mode only, `sim_clock`): ADVANCE(at) sets the agent's time, writes it to the
  workers' clock file, waits until each running worker exited or reported it saw `at`, reaps and
  publishes the exits, then answers with a ClockAck (services/node_agent/clock_ticks.py).

`NodeAgent` is the composition root of these parts: collaborators that each own their state and
are handed what they need (imports go one way, from here down; the layers contract in
pyproject.toml):
1. `commands.CommandHandler`: verify, answer a repeat, dispatch (no state of its own);
2. `binds.Binder`, `eviction.Evictor` (owns the evictions in flight), `reclaim_warning.ReclaimWarner`:
   carry out bind, evict and warn commands;
3. `recovery.recover`: after a restart (a function: it keeps nothing);
4. `clock_ticks.ClockTicks`: the topic clock; `telemetry.Telemetry`: GPU samples, the heartbeat;
   `fence.Fence` (owns the contact state): freezes the workers when heartbeats stop reaching the
   broker (the heartbeat tells it of each one acknowledged);
5. `watcher.WorkerWatcher` (owns the poll lock): reap and report exits, publish pending acks;
6. `workers.WorkerSupervisor` (owns the started processes), `publisher.AckPublisher` (the signed
   voice), `agent_metrics.AgentMetrics`.
All share one `Journal` (journal.py), which owns the durable state. The agent itself holds only
its collaborators and is what the service (and the unit tests) drive.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from opentelemetry import trace

from gfs.schemas.clock import ClockAck, ClockTick
from gfs.schemas.envelope import Envelope
from gfs.schemas.telemetry import NodeTelemetry
from gfs.services.node_agent.agent_metrics import AgentMetrics
from gfs.services.node_agent.binds import Binder
from gfs.services.node_agent.clock_ticks import ClockTicks
from gfs.services.node_agent.commands import CommandHandler
from gfs.services.node_agent.eviction import Evictor
from gfs.services.node_agent.fence import Fence
from gfs.services.node_agent.gpu import GpuBackend
from gfs.services.node_agent.journal import Journal
from gfs.services.node_agent.publisher import PRODUCER, TRACER, AckPublisher, AckSink, utc_now
from gfs.services.node_agent.reclaim_warning import ReclaimWarner
from gfs.services.node_agent.recovery import recover
from gfs.services.node_agent.security import CommandGuard, Rejection
from gfs.services.node_agent.sim_clock import SimClock
from gfs.services.node_agent.telemetry import Telemetry
from gfs.services.node_agent.watcher import WorkerWatcher
from gfs.services.node_agent.worker_env import worker_environment
from gfs.services.node_agent.workers import (
    NOT_STARTED_EXIT_CODE,
    SIM_ENV,
    UNKNOWN_EXIT_CODE,
    UNKNOWN_EXIT_DETAIL,
    WORKER_MARKER,
    WorkerSupervisor,
)

# The agent's public names, where its users (the service, tests) have always imported them from.
__all__ = [
    "NOT_STARTED_EXIT_CODE",
    "PRODUCER",
    "SIM_ENV",
    "TRACER",
    "UNKNOWN_EXIT_CODE",
    "UNKNOWN_EXIT_DETAIL",
    "WORKER_MARKER",
    "AckSink",
    "AgentMetrics",
    "NodeAgent",
    "utc_now",
]


class NodeAgent:
    """One node's agent: builds its collaborators (module doc) and is driven through them."""

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
        fence_after_s: float = 0.0,
        fence_thaw_within_s: float = 20.0,
    ) -> None:
        """`clock` is the agent's time (acks, command freshness): the sim clock's `now` in topic
        mode. `wall_clock` (default: `clock`) stamps the heartbeats, which stay on real time.
        `checkpoint_root`: workers get GFS_CHECKPOINT_DIR=<root>/<task>/<worker> (None: the
        variable is left as the agent's environment has it). `worker_env`: the base environment
        of workers (default: the allowed part of the agent's own, never a key or the database URL:
        worker_env.py). `fence_after_s` / `fence_thaw_within_s`: self-fencing (fence.py; 0: off,
        the default here; the service passes AGENT_FENCE_AFTER_S)."""
        self.node = node
        self.journal = journal
        self.metrics = metrics
        self.clock = clock
        self.log_dir = log_dir
        tracer = trace.get_tracer(TRACER, tracer_provider=tracer_provider)
        self.publisher = AckPublisher(node=node, sink=sink, key=guard.key, clock=clock, tracer=tracer)
        self.supervisor = WorkerSupervisor(
            node=node,
            gpu_count=backend.count,
            journal=journal,
            clock=clock,
            worker_env=worker_environment(os.environ) if worker_env is None else dict(worker_env),
            sim_clock=sim_clock,
            checkpoint_root=checkpoint_root,
        )
        self.evictor = Evictor(
            node=node, journal=journal, supervisor=self.supervisor, publisher=self.publisher,
            metrics=metrics, tracer=tracer, clock=clock, kill_wait_s=kill_wait_s,
        )  # fmt: skip
        self.watcher = WorkerWatcher(
            supervisor=self.supervisor, journal=journal, publisher=self.publisher,
            evicting=self.evictor.is_in_flight, clock=clock,
            retention=guard.max_age + guard.clock_skew, watch_s=watch_s,
        )  # fmt: skip
        self.commands = CommandHandler(
            node=node, guard=guard, clock=clock, journal=journal, metrics=metrics, tracer=tracer,
            publisher=self.publisher,
            binder=Binder(
                journal=journal, supervisor=self.supervisor, publisher=self.publisher, clock=clock,
                tracer=tracer, log_dir=log_dir,
            ),
            evictor=self.evictor,
            warner=ReclaimWarner(journal=journal, clock=clock),
        )  # fmt: skip
        self.clock_ticks = ClockTicks(
            node=node, journal=journal, sim_clock=sim_clock, supervisor=self.supervisor,
            watcher=self.watcher, publisher=self.publisher, tracer=tracer, clock_wait_s=clock_wait_s,
        )  # fmt: skip
        self.fence = Fence(
            after_s=fence_after_s, thaw_within_s=fence_thaw_within_s, journal=journal, clock=clock
        )
        self.heartbeat = Telemetry(
            node=node, gpu_model=gpu_model, backend=backend, journal=journal,
            wall_clock=wall_clock or clock, sink=sink, key=guard.key,
            acknowledged=self.fence.acknowledged, monotonic=self.fence.monotonic,
        )  # fmt: skip

    # What the service drives ------------------------------------------------------------------

    async def handle(
        self, envelope: Envelope[Any], *, headers: Sequence[tuple[str, bytes]] = (), received_at: datetime
    ) -> None:
        """Act on one command read from this node's partition; never raises for a bad command."""
        await self.commands.handle(envelope, headers=headers, received_at=received_at)

    def reject(self, reason: Rejection, detail: str) -> None:
        """Count and log a command refused before it reached `handle` (undecodable)."""
        self.commands.reject(reason, detail)

    async def recover(self) -> None:
        """After a (re)start, before the first command (recovery.py)."""
        await recover(
            node=self.node, journal=self.journal, clock=self.clock, publisher=self.publisher,
            evictor=self.evictor, watcher=self.watcher, fence=self.fence,
        )  # fmt: skip

    async def watch(self, stop: asyncio.Event) -> None:
        """Poll the workers for exit until `stop` (watcher.py)."""
        await self.watcher.watch(stop)

    async def on_tick(self, tick: ClockTick) -> ClockAck | None:
        """Handle a ClockTick (clock_ticks.py); returns the ClockAck published, if one was."""
        return await self.clock_ticks.on_tick(tick)

    def telemetry(self) -> NodeTelemetry:
        """One sample of every GPU, with the shares the agent's running workers hold."""
        return self.heartbeat.sample()

    async def publish_telemetry(self) -> None:
        await self.heartbeat.publish()

    @property
    def evictions(self) -> Mapping[UUID, asyncio.Task[None]]:
        """The evictions in their grace period (the evictor's): cancelled when the agent stops."""
        return self.evictor.in_flight
