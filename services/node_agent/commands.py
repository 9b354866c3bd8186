"""Commands: verify one read from this node's partition, answer a repeat from the journal, hand a new
one to the collaborator that carries it out (binds.py, eviction.py, reclaim_warning.py).

`CommandHandler` owns no state of its own: the journal says which commands were seen, the guard
(security.py) decides whether a command may be acted on, and the metrics count what happened. A
command is never acted on twice: its id is journaled before any effect, so a redelivery (or a
retry by the reader) is answered again from the journal instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from opentelemetry.trace import Tracer

from gfs.schemas.commands import BindCommand, EvictCommand, WarnCommand
from gfs.schemas.envelope import Envelope
from gfs.schemas.topics import EVICT_ACK_TOPIC, WORKER_ACK_TOPIC
from gfs.services.node_agent.agent_metrics import AgentMetrics
from gfs.services.node_agent.binds import Binder
from gfs.services.node_agent.eviction import Evictor
from gfs.services.node_agent.journal import CommandEntry, Journal
from gfs.services.node_agent.publisher import AckPublisher
from gfs.services.node_agent.reclaim_warning import ReclaimWarner
from gfs.services.node_agent.security import CommandGuard, Rejection
from gfs.services.node_agent.workers import NOT_STARTED_EXIT_CODE

# Every part of the agent logs under the one logger name it always had, so a deployment's log
# filters (and tests' caplog) see the same records whichever module emits them.
log = logging.getLogger("gfs.services.node_agent.agent")


class CommandHandler:
    """Verifies, deduplicates and dispatches this node's commands (module doc). `clock` is the
    agent's time, against which a command's freshness is judged."""

    def __init__(
        self,
        *,
        node: str,
        guard: CommandGuard,
        clock: Callable[[], datetime],
        journal: Journal,
        metrics: AgentMetrics,
        tracer: Tracer,
        publisher: AckPublisher,
        binder: Binder,
        evictor: Evictor,
        warner: ReclaimWarner,
    ) -> None:
        self.node = node
        self.guard = guard
        self.clock = clock
        self.journal = journal
        self.metrics = metrics
        self.tracer = tracer
        self.publisher = publisher
        self.binder = binder
        self.evictor = evictor
        self.warner = warner

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
            await self.binder.bind(command, trace_headers, received_at)
        elif isinstance(command, EvictCommand):
            await self.evictor.evict(command, trace_headers, received_at)
        else:
            await self.warner.warn(command, trace_headers, received_at)
        self.metrics.commands.add(1, {"kind": kind, "result": "accepted"})

    def reject(self, reason: Rejection, detail: str) -> None:
        self.metrics.rejections[reason] += 1
        self.metrics.rejected.add(1, {"reason": str(reason)})
        log.warning("command rejected reason=%s %s", reason, detail)

    async def _answer_again(self, seen: CommandEntry) -> None:
        if seen.kind == "bind":
            for worker in self.journal.workers_of_command(seen.command_id):
                if worker.pid is not None:
                    await self.publisher.publish(WORKER_ACK_TOPIC, self.publisher.started(worker), seen)
                elif worker.exit_code == NOT_STARTED_EXIT_CODE:
                    await self.publisher.publish(WORKER_ACK_TOPIC, self.publisher.exited(worker), seen)
        elif seen.ack is not None:
            await self.publisher.publish(EVICT_ACK_TOPIC, seen.ack, seen)
            seen.ack_published = True
        # An eviction still in its grace period answers when it ends.
