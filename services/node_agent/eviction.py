"""Eviction: SIGTERM first (the latency that matters), journal the command as accepted, then wait
out the grace period in a task of its own, SIGKILL what is left, journal the ack and publish it.

`Evictor` owns the evictions in flight: one asyncio task per accepted eviction command, from its
SIGTERM until its ack is published (or the agent stops: it stays "accepted" in the journal and
recovery resumes it with `resume`). It is given the supervisor (to wait for the workers' exits),
the publisher (for the ack) and the metrics (SIGTERM latency). While an eviction is in flight its
ack is its own to publish; the watcher asks `is_in_flight` before retrying an unpublished one.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from uuid import UUID

from opentelemetry.trace import Tracer

from gfs.schemas.commands import EvictAck, EvictCommand, EvictOutcome
from gfs.schemas.fields import scrub_text
from gfs.schemas.topics import EVICT_ACK_TOPIC
from gfs.services.node_agent import procs
from gfs.services.node_agent.agent_metrics import AgentMetrics
from gfs.services.node_agent.journal import CommandEntry, Journal, WorkerEntry
from gfs.services.node_agent.publisher import AckPublisher
from gfs.services.node_agent.workers import WorkerSupervisor

# Every part of the agent logs under the one logger name it always had, so a deployment's log
# filters (and tests' caplog) see the same records whichever module emits them.
log = logging.getLogger("gfs.services.node_agent.agent")


class Evictor:
    """Carries out eviction commands; owns the ones in flight (module doc). `kill_wait_s`: how
    long to wait for the workers' exit after SIGKILL before the ack says they still run."""

    def __init__(
        self,
        *,
        node: str,
        journal: Journal,
        supervisor: WorkerSupervisor,
        publisher: AckPublisher,
        metrics: AgentMetrics,
        tracer: Tracer,
        clock: Callable[[], datetime],
        kill_wait_s: float,
    ) -> None:
        self.node = node
        self.journal = journal
        self.supervisor = supervisor
        self.publisher = publisher
        self.metrics = metrics
        self.tracer = tracer
        self.clock = clock
        self.kill_wait_s = kill_wait_s
        self._in_flight: dict[UUID, asyncio.Task[None]] = {}

    @property
    def in_flight(self) -> Mapping[UUID, asyncio.Task[None]]:
        """The evictions in their grace period, by command id (the agent cancels them on stop)."""
        return self._in_flight

    def is_in_flight(self, command_id: UUID) -> bool:
        return command_id in self._in_flight

    async def evict(
        self, command: EvictCommand, headers: list[tuple[str, str]], received_at: datetime
    ) -> None:
        """SIGTERM the command's targets and accept it; the grace period runs in a task of its own."""
        # An eviction naming an attempt stops that run only: a later run of the same task on this
        # node (bound after the service saw this run end) is not its business.
        targets = [
            w
            for task in command.task_ids
            for w in self.journal.live_workers(task)
            if w.pid is not None and (command.attempt is None or w.attempt in (None, command.attempt))
        ]
        entry = CommandEntry(
            command_id=command.command_id,
            kind="evict",
            issued_at=command.issued_at,
            received_at=received_at,
            trace_headers=headers,
            task_ids=command.task_ids,
            attempt=command.attempt,
            grace_seconds=command.grace_seconds,
            targets=[w.key for w in targets],
        )
        self.journal.state.commands[str(command.command_id)] = entry
        for task in command.task_ids:
            if command.attempt is not None:  # remembered whether or not the run is here yet
                self.journal.state.revoked.setdefault(task, {})[command.attempt] = (
                    command.command_id,
                    command.issued_at,
                )
            elif not any(w.task_id == task for w in targets):
                self.journal.state.evicted_unstarted[task] = (command.command_id, command.issued_at)
        with self.tracer.start_as_current_span(
            "agent.sigterm", attributes={"gfs.task_ids": list(command.task_ids), "gfs.workers": len(targets)}
        ):
            self._signal(entry, targets, signal.SIGTERM)
        # Accepted. Not saved here: one save per fetched batch (the reader flushes before it
        # commits) keeps a burst of evictions from queueing behind an fsync each. A crash before
        # that flush redelivers the command, and a second SIGTERM to a stopping worker is harmless.
        self.journal.mark()
        if entry.sigterm_at is not None:
            self.metrics.sigterm_latency.record((entry.sigterm_at - received_at).total_seconds())
            self.metrics.sigterm_since_issued.record((entry.sigterm_at - command.issued_at).total_seconds())
        self._finish_later(entry)

    def resume(self, entry: CommandEntry) -> None:
        """An eviction accepted before a restart: a target not yet signalled gets its SIGTERM now;
        the grace period still runs from the SIGTERM journaled before the restart when there was one."""
        targets = [self.journal.state.workers[k] for k in entry.targets if k in self.journal.state.workers]
        with self.publisher.in_trace_of(entry):
            self._signal(entry, targets, signal.SIGTERM)
            self._finish_later(entry)

    def _finish_later(self, entry: CommandEntry) -> None:
        # Runs in the current context (the command's span), so its ack continues the same trace.
        task = asyncio.create_task(self._finish_eviction(entry), name=f"evict-{entry.command_id}")
        self._in_flight[entry.command_id] = task
        task.add_done_callback(lambda _: self._in_flight.pop(entry.command_id, None))

    def _signal(self, entry: CommandEntry, targets: Sequence[WorkerEntry], sig: signal.Signals) -> None:
        for worker in targets:
            if not worker.live or worker.pid is None or worker.start_ticks is None:
                continue
            if sig is signal.SIGTERM and worker.sigterm_at is not None:
                continue  # another eviction already asked it to stop: one SIGTERM is enough
            result = procs.signal_group(worker.pid, worker.start_ticks, sig)
            now = self.clock()
            if result is procs.SignalResult.REFUSED:
                entry.failures.append(f"{sig.name} to pid {worker.pid} refused (EPERM)")
                continue
            worker.evicting_command = worker.evicting_command or entry.command_id
            if sig is signal.SIGTERM:
                worker.sigterm_at = now
                entry.sigterm_at = now
            else:
                worker.sigkill_at = now
            log.info(
                "%s task=%s worker=%d pid=%d (%s)",
                sig.name,
                worker.task_id,
                worker.worker_index,
                worker.pid,
                result,
            )

    async def _finish_eviction(self, entry: CommandEntry) -> None:
        targets = [
            self.journal.state.workers[key] for key in entry.targets if key in self.journal.state.workers
        ]
        if targets:
            deadline = (entry.sigterm_at or self.clock()) + timedelta(seconds=entry.grace_seconds)
            # Never more than the grace: on the sim clock a resumed eviction's SIGTERM time and
            # "now" (the wall clock until the next tick) may be years apart.
            wait_s = min(entry.grace_seconds, (deadline - self.clock()).total_seconds())
            await self.supervisor.wait_exited(targets, wait_s)
            remaining = [w for w in targets if w.live]
            if remaining:
                with self.tracer.start_as_current_span(
                    "agent.sigkill", attributes={"gfs.workers": len(remaining)}
                ):
                    self._signal(entry, remaining, signal.SIGKILL)
                self.journal.mark()
                await self.supervisor.wait_exited(remaining, self.kill_wait_s)
        outcome, detail = self._outcome(entry, targets)
        entry.ack = EvictAck(
            command_id=entry.command_id,
            node=self.node,
            task_ids=entry.task_ids,
            outcome=outcome,
            acked_at=self.clock(),
            detail=detail,
            attempt=entry.attempt,
        )
        entry.state = "done"
        self.journal.mark()  # a crash before the flush resumes the eviction and acks it again
        log.info("evict %s: %s %s", entry.command_id, outcome, detail)
        try:
            await self.publisher.publish(EVICT_ACK_TOPIC, entry.ack, entry)
        except Exception as exc:  # the watcher retries it (watcher.py: publish_pending)
            log.warning("EvictAck %s not published yet: %r", entry.command_id, exc)
            return
        entry.ack_published = True

    def _outcome(self, entry: CommandEntry, targets: Sequence[WorkerEntry]) -> tuple[EvictOutcome, str]:
        if not targets:
            return EvictOutcome.NOT_RUNNING, ""
        alive = [w for w in targets if w.live]
        problems = list(entry.failures) + [f"pid {w.pid} still running after SIGKILL" for w in alive]
        if problems:
            return EvictOutcome.FAILED, scrub_text("; ".join(problems))[:2000]
        if any(w.sigkill_at is not None for w in targets):
            return EvictOutcome.KILLED, ""
        return EvictOutcome.CHECKPOINTED, ""
