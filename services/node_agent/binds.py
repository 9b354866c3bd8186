"""Bind: journal the command and its workers as "starting", fork each worker, journal the pids,
publish WorkerStarted (the caller then commits the offset; agent.py's module doc has what a crash
at each point leads to).

`Binder` owns no state of its own: the command and its workers go to the journal, the processes to
the supervisor, the acks out through the publisher. It also owns the two rules that keep a bind
from running what the scheduler no longer wants: a worker of the same attempt already running here
is not started twice, and a bind whose run was evicted before it arrived never starts.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from uuid import UUID

from opentelemetry.trace import Tracer

from gfs.schemas.commands import BindCommand
from gfs.schemas.topics import WORKER_ACK_TOPIC
from gfs.services.node_agent.journal import CommandEntry, Journal, WorkerEntry
from gfs.services.node_agent.paths import path_part
from gfs.services.node_agent.publisher import AckPublisher
from gfs.services.node_agent.workers import WorkerSupervisor, mark_not_started


class Binder:
    """Carries out bind commands (module doc). `log_dir`: where each worker's output goes, one
    file per task, worker and command."""

    def __init__(
        self,
        *,
        journal: Journal,
        supervisor: WorkerSupervisor,
        publisher: AckPublisher,
        clock: Callable[[], datetime],
        tracer: Tracer,
        log_dir: Path,
    ) -> None:
        self.journal = journal
        self.supervisor = supervisor
        self.publisher = publisher
        self.clock = clock
        self.tracer = tracer
        self.log_dir = log_dir

    async def bind(self, command: BindCommand, headers: list[tuple[str, str]], received_at: datetime) -> None:
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
        self.journal.save()  # "starting": a crash from here on is recoverable (agent.py's module doc)
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
                    mark_not_started(worker, self.clock(), f"evicted by {evicted[0]} before it started")
                else:
                    self.supervisor.start(command, worker)
        entry.state = "done"
        # The pids reach the disk at the reader's flush before it commits; a crash before that is
        # covered by the environment marker (see recovery.py).
        self.journal.mark()
        wanted = {p.worker_index for p in command.placements}
        for worker in running.values():
            if worker.pid is not None and worker.worker_index in wanted:
                await self.publisher.publish(WORKER_ACK_TOPIC, self.publisher.started(worker), entry)
        for worker in workers:
            if worker.pid is not None:
                await self.publisher.publish(WORKER_ACK_TOPIC, self.publisher.started(worker), entry)
                worker.started_acked = True  # only now may the watcher report its exit
            else:
                worker.exit_acked = True  # set first so the watcher does not report it too
                await self.publisher.publish(WORKER_ACK_TOPIC, self.publisher.exited(worker), entry)
