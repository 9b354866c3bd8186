"""Recovery after a (re)start: re-adopt or report the journaled workers, publish what was not
published, resume the accepted evictions with the grace deadline they had.

Part of the node agent (agent.py): a class over the evictions (eviction.py).
"""

from __future__ import annotations

import logging
import signal

from schemas.topics import WORKER_ACK_TOPIC
from services.node_agent import procs
from services.node_agent.agent_base import WORKER_MARKER
from services.node_agent.eviction import Evictions

# Every part of the agent logs under the one logger name it always had, so a deployment's log
# filters (and tests' caplog) see the same records whichever module emits them.
log = logging.getLogger("services.node_agent.agent")


class Recovery(Evictions):
    async def recover(self) -> None:
        """After a (re)start: re-adopt or report journaled workers, publish what was not
        published, resume accepted evictions."""
        now = self.clock()
        for worker in self.journal.live_workers():
            if worker.pid is None:  # forked (or not) just before the last agent died
                pid = procs.find_by_marker(WORKER_MARKER, f"{self.node}/{worker.key}")
                ticks = None if pid is None else procs.start_ticks(pid)
                if pid is None or ticks is None:
                    self._not_started(worker, now, "the agent stopped while starting it")
                else:
                    worker.pid, worker.start_ticks, worker.started_at = pid, ticks, now
            if worker.pid is not None:
                log.info(
                    "re-adopting task=%s worker=%d pid=%d", worker.task_id, worker.worker_index, worker.pid
                )
        for entry in self.journal.state.commands.values():
            if entry.kind == "bind":
                entry.state = "done"
        self.journal.save()
        for worker in list(self.journal.state.workers.values()):
            if worker.pid is not None and not worker.started_acked:
                await self._publish(
                    WORKER_ACK_TOPIC, self._started(worker), self.journal.command(worker.command_id)
                )
                worker.started_acked = True
        for entry in list(self.journal.state.commands.values()):
            if entry.kind == "evict" and entry.state == "accepted":
                # Resume: a target not yet signalled gets its SIGTERM now; the grace period still
                # runs from the SIGTERM journaled before the restart when there was one.
                targets = [
                    self.journal.state.workers[k] for k in entry.targets if k in self.journal.state.workers
                ]
                with self._in_trace_of(entry):
                    self._signal(entry, targets, signal.SIGTERM)
                    self._finish_later(entry)
        self.journal.save()
        await self.poll_workers()  # also publishes the eviction acks that were never sent
        self.journal.flush()
