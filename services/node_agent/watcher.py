"""The watcher: poll the workers for exit, report each exit, publish what was recorded but not yet
published, flush and now and then prune the journal.

`WorkerWatcher` owns the poll lock and the time of the last prune. The watcher and a clock tick
(clock_ticks.py) both reap and report exits; the lock makes that one at a time, so an exit is
published once and a tick's reap waits for the watcher's publishes in flight. It is given the
supervisor (who reaps), the publisher (who speaks) and a question for the evictor (is this
eviction still in its grace period? then its ack is the evictor's to publish, not ours).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from uuid import UUID

from gfs.schemas.topics import EVICT_ACK_TOPIC, WORKER_ACK_TOPIC
from gfs.services.node_agent.journal import Journal
from gfs.services.node_agent.publisher import AckPublisher
from gfs.services.node_agent.workers import WorkerSupervisor

# Every part of the agent logs under the one logger name it always had, so a deployment's log
# filters (and tests' caplog) see the same records whichever module emits them.
log = logging.getLogger("gfs.services.node_agent.agent")


class WorkerWatcher:
    """Reports worker exits and pending acks (module doc). `retention`: how long a finished
    command stays in the journal (the guard's max age plus its clock skew: a command older than
    that is refused anyway, so it can no longer come back as a repeat)."""

    def __init__(
        self,
        *,
        supervisor: WorkerSupervisor,
        journal: Journal,
        publisher: AckPublisher,
        evicting: Callable[[UUID], bool],
        clock: Callable[[], datetime],
        retention: timedelta,
        watch_s: float,
    ) -> None:
        self.supervisor = supervisor
        self.journal = journal
        self.publisher = publisher
        self.evicting = evicting
        self.clock = clock
        self.retention = retention
        self.watch_s = watch_s
        self._last_prune = clock()
        self._polling = asyncio.Lock()

    async def watch(self, stop: asyncio.Event) -> None:
        """Poll the workers for exit until `stop`; report each exit; prune the journal now and then."""
        while not stop.is_set():
            await self.poll_workers()
            self.journal.flush()
            now = self.clock()
            # abs: a sim clock may start behind the wall clock the agent started on.
            if abs(now - self._last_prune) > timedelta(seconds=60):
                self._last_prune = now
                if self.journal.prune(now - self.retention):
                    self.journal.save()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.watch_s)

    async def poll_workers(self) -> None:
        """Reap the workers that ended, then publish every pending ack (one poller at a time)."""
        async with self._polling:
            self.supervisor.reap()
            await self.publish_pending()

    async def publish_pending(self) -> None:
        """Acks recorded but not yet published: worker exits, and eviction acks whose publish
        failed. A WorkerExited waits for its WorkerStarted, so the two never arrive swapped."""
        for entry in self.journal.state.commands.values():
            if entry.ack is not None and not entry.ack_published and not self.evicting(entry.command_id):
                with contextlib.suppress(Exception):
                    await self.publisher.publish(EVICT_ACK_TOPIC, entry.ack, entry)
                    entry.ack_published = True
                    self.journal.mark()
        pending = [
            w
            for w in self.journal.state.workers.values()
            if not w.live and not w.exit_acked and (w.started_acked or w.pid is None)
        ]
        if not pending:
            return
        results = await asyncio.gather(
            *(
                self.publisher.publish(
                    WORKER_ACK_TOPIC, self.publisher.exited(w), self.journal.command(w.command_id)
                )
                for w in pending
            ),
            return_exceptions=True,
        )
        for worker, result in zip(pending, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("WorkerExited for %s not published yet: %r", worker.key, result)
            else:
                worker.exit_acked = True
        self.journal.mark()
