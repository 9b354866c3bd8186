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

The agent is split by concept, imports going one way (agent -> recovery -> eviction -> workers ->
agent_base; telemetry -> agent_base; clock_ticks is a mixin): `agent` handles commands (verify,
repeat, bind), `workers` starts and watches workers, `eviction` signals and acks, `recovery`
resumes after a restart, `telemetry` samples the GPUs, `agent_base` holds the state and publishes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from schemas.commands import BindCommand, EvictCommand, WarnCommand
from schemas.envelope import Envelope
from schemas.topics import EVICT_ACK_TOPIC, WORKER_ACK_TOPIC
from services.node_agent.agent_base import (
    NOT_STARTED_EXIT_CODE,
    PRODUCER,
    SIM_ENV,
    TRACER,
    UNKNOWN_EXIT_CODE,
    UNKNOWN_EXIT_DETAIL,
    WORKER_MARKER,
    AckSink,
    AgentMetrics,
    utc_now,
)
from services.node_agent.clock_ticks import ClockTicks
from services.node_agent.journal import CommandEntry, WorkerEntry
from services.node_agent.paths import path_part
from services.node_agent.reclaim_warning import ReclaimWarnings
from services.node_agent.recovery import Recovery
from services.node_agent.security import Rejection
from services.node_agent.telemetry import Telemetry

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

log = logging.getLogger(__name__)


class NodeAgent(Recovery, ReclaimWarnings, Telemetry, ClockTicks):
    """One node's agent: its parts are the classes it is made of (module doc)."""

    # Commands ----------------------------------------------------------------------------------

    async def handle(
        self, envelope: Envelope[Any], *, headers: Sequence[tuple[str, bytes]] = (), received_at: datetime
    ) -> None:
        """Act on one command read from this node's partition; never raises for a bad command."""
        command = envelope.payload
        if not isinstance(command, BindCommand | EvictCommand | WarnCommand):
            return
        kind = (
            "bind"
            if isinstance(command, BindCommand)
            else "evict"
            if isinstance(command, EvictCommand)
            else "warn"
        )
        with self.tracer.start_as_current_span(
            "agent.verify", attributes={"gfs.command_id": str(command.command_id), "gfs.node": self.node}
        ) as span:
            reason = self.guard.check(command, self.clock())
            if reason is not None:
                span.set_attribute("gfs.rejected", str(reason))
                self.reject(
                    reason,
                    f"{type(command).__name__} {command.command_id}: "
                    f"{self.guard.explain(command, reason, self.clock())}",
                )
                return
            seen = self.journal.command(command.command_id)
        if seen is not None:
            self.metrics.commands.add(1, {"kind": kind, "result": "repeat"})
            log.info("repeated command %s (%s): answered again, not acted on", command.command_id, seen.state)
            await self._answer_again(seen)
            return
        trace_headers = [(name, value.decode("utf-8", "replace")) for name, value in headers]
        if isinstance(command, BindCommand):
            await self._bind(command, trace_headers, received_at)
        elif isinstance(command, EvictCommand):
            await self._evict(command, trace_headers, received_at)
        else:
            await self._warn(command, trace_headers, received_at)
        self.metrics.commands.add(1, {"kind": kind, "result": "accepted"})

    def reject(self, reason: Rejection, detail: str) -> None:
        self.metrics.rejections[reason] += 1
        self.metrics.rejected.add(1, {"reason": str(reason)})
        log.warning("command rejected reason=%s %s", reason, detail)

    async def _answer_again(self, seen: CommandEntry) -> None:
        if seen.kind == "bind":
            for worker in self.journal.workers_of_command(seen.command_id):
                if worker.pid is not None:
                    await self._publish(WORKER_ACK_TOPIC, self._started(worker), seen)
                elif worker.exit_code == NOT_STARTED_EXIT_CODE:
                    await self._publish(WORKER_ACK_TOPIC, self._exited_ack(worker), seen)
        elif seen.ack is not None:
            await self._publish(EVICT_ACK_TOPIC, seen.ack, seen)
            seen.ack_published = True
        # An eviction still in its grace period answers when it ends.

    # Bind --------------------------------------------------------------------------------------

    async def _bind(
        self, command: BindCommand, headers: list[tuple[str, str]], received_at: datetime
    ) -> None:
        entry = CommandEntry(
            command_id=command.command_id,
            kind="bind",
            issued_at=command.issued_at,
            received_at=received_at,
            trace_headers=headers,
        )
        # A bind the service issued again (reconciliation: it saw no start in time) may meet the
        # run it stands for, when the first one was only late: a worker of the same attempt that
        # already runs here is not started twice; its WorkerStarted is published again instead.
        running = {
            w.worker_index: w
            for w in self.journal.live_workers(command.task_id)
            if command.attempt is not None and w.attempt == command.attempt
        }
        workers = [
            WorkerEntry(
                command_id=command.command_id,
                task_id=command.task_id,
                worker_index=p.worker_index,
                task_class=str(command.task_class),
                attempt=command.attempt,
                gpu_indices=p.gpu_indices,
                gpu_fraction=p.gpu_fraction,
                # One path component per id: a task id such as `../x` stays inside the log folder.
                log_path=str(
                    self.log_dir / f"{path_part(command.task_id)}.{p.worker_index}.{command.command_id}.log"
                ),
            )
            for p in command.placements
            if p.worker_index not in running
        ]
        self.journal.state.commands[str(command.command_id)] = entry
        for worker in workers:
            self.journal.state.workers[worker.key] = worker
        self.journal.save()  # "starting": a crash from here on is recoverable (see the module doc)
        revoked = self.journal.state.revoked.get(command.task_id, {})
        if command.attempt is not None and command.attempt in revoked:
            evicted: tuple[UUID, datetime] | None = revoked[command.attempt]  # this very run revoked
        else:  # commands without an attempt: an eviction issued after this bind
            unstarted = self.journal.state.evicted_unstarted.get(command.task_id)
            evicted = unstarted if unstarted is not None and unstarted[1] >= command.issued_at else None
        with self.tracer.start_as_current_span(
            "agent.spawn", attributes={"gfs.task_id": command.task_id, "gfs.workers": len(workers)}
        ):
            for worker in workers:
                if evicted is not None:
                    # Evicted before this bind arrived: starting it would run a task the
                    # scheduler has already taken off this node.
                    worker.evicting_command = evicted[0]
                    self._not_started(worker, self.clock(), f"evicted by {evicted[0]} before it started")
                else:
                    self._start(command, worker)
        entry.state = "done"
        # The pids reach the disk at the reader's flush before it commits; a crash before that is
        # covered by the environment marker (see `recover`).
        self.journal.mark()
        wanted = {p.worker_index for p in command.placements}
        for worker in running.values():
            if worker.pid is not None and worker.worker_index in wanted:
                await self._publish(WORKER_ACK_TOPIC, self._started(worker), entry)
        for worker in workers:
            if worker.pid is not None:
                await self._publish(WORKER_ACK_TOPIC, self._started(worker), entry)
                worker.started_acked = True  # only now may the watcher report its exit
            else:
                worker.exit_acked = True  # set first so the watcher does not report it too
                await self._publish(WORKER_ACK_TOPIC, self._exited_ack(worker), entry)
