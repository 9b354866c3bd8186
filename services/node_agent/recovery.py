"""Recovery after a (re)start: re-adopt or report the journaled workers, publish what was not
published, resume the accepted evictions with the grace deadline they had.

A function, not an object: recovery runs once, before the agent reads its first command, and keeps
nothing. What it changes is the journal's (workers re-adopted or marked not started, binds done),
the evictor's (the resumed evictions become its in-flight ones) and, through the watcher, what is
published. It is given each of them explicitly by the composition root (agent.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from gfs.schemas.topics import WORKER_ACK_TOPIC
from gfs.services.node_agent import procs
from gfs.services.node_agent.eviction import Evictor
from gfs.services.node_agent.fence import Fence
from gfs.services.node_agent.journal import Journal
from gfs.services.node_agent.publisher import AckPublisher
from gfs.services.node_agent.watcher import WorkerWatcher
from gfs.services.node_agent.workers import WORKER_MARKER, mark_not_started

# Every part of the agent logs under the one logger name it always had, so a deployment's log
# filters (and tests' caplog) see the same records whichever module emits them.
log = logging.getLogger("gfs.services.node_agent.agent")


async def recover(
    *,
    node: str,
    journal: Journal,
    clock: Callable[[], datetime],
    publisher: AckPublisher,
    evictor: Evictor,
    watcher: WorkerWatcher,
    fence: Fence | None = None,
) -> None:
    """After a (re)start: re-adopt or report journaled workers, publish what was not
    published, resume accepted evictions."""
    now = clock()
    for worker in journal.live_workers():
        if worker.pid is None:  # forked (or not) just before the last agent died
            pid = procs.find_by_marker(WORKER_MARKER, f"{node}/{worker.key}")
            ticks = None if pid is None else procs.start_ticks(pid)
            if pid is None or ticks is None:
                mark_not_started(worker, now, "the agent stopped while starting it")
            else:
                worker.pid, worker.start_ticks, worker.started_at = pid, ticks, now
        if worker.pid is not None:
            log.info("re-adopting task=%s worker=%d pid=%d", worker.task_id, worker.worker_index, worker.pid)
    # Frozen by the fence when the agent stopped: the cut outlived the agent, so the task may run
    # elsewhere by now; killed and reported evicted (fence.py).
    frozen = [w for w in journal.live_workers() if w.frozen_at is not None and w.pid is not None]
    if frozen and fence is not None:
        fence.kill(frozen, "fenced: still frozen when the agent started again")
        log.warning("fence: %d worker(s) frozen before the restart killed", len(frozen))
    for entry in journal.state.commands.values():
        if entry.kind == "bind":
            entry.state = "done"
    journal.save()
    for worker in list(journal.state.workers.values()):
        if worker.pid is not None and not worker.started_acked:
            await publisher.publish(
                WORKER_ACK_TOPIC, publisher.started(worker), journal.command(worker.command_id)
            )
            worker.started_acked = True
    for entry in list(journal.state.commands.values()):
        if entry.kind == "evict" and entry.state == "accepted":
            evictor.resume(entry)
    journal.save()
    await watcher.poll_workers()  # also publishes the eviction acks that were never sent
    journal.flush()
