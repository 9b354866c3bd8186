"""The agent's local journal: the processes it started and the commands it accepted.

One JSON file per node, rewritten whole on every change (temp file, fsync, rename, fsync of the
directory), so after a crash — even `kill -9` or a power cut — it holds either the previous or the
new state, never a torn one. It stays small: finished workers and answered commands are pruned
once their command is older than the staleness window (a replay that old is rejected as stale, so
its id need not be remembered).

What it makes possible after a restart:
- re-adopting running workers (pid + start time, see `procs`), and reporting those that ended;
- resuming an accepted eviction whose ack was never published;
- answering a repeated command id with the same ack instead of acting twice;
- publishing acknowledgements that were recorded but not yet sent.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from gfs.schemas.commands import EvictAck

JOURNAL_VERSION = 1


class JournalError(RuntimeError):
    """The journal exists but cannot be read: refusing to start beats forgetting our processes."""


class WorkerEntry(BaseModel):
    """One worker the agent started (or tried to start)."""

    model_config = ConfigDict(extra="forbid")

    command_id: UUID
    task_id: str
    worker_index: int
    task_class: str
    attempt: int | None = None  # the BindCommand's attempt (None: a command without one)
    gpu_indices: tuple[int, ...]
    gpu_fraction: float = 1.0
    log_path: str
    # Set once the process exists; None while "starting" (journaled before the fork).
    pid: int | None = None
    start_ticks: int | None = None
    started_at: datetime | None = None
    started_acked: bool = False
    # Eviction bookkeeping: when the agent signalled it (SIGTERM, then maybe SIGKILL).
    evicting_command: UUID | None = None
    sigterm_at: datetime | None = None
    sigkill_at: datetime | None = None
    # Reclaim warnings (reclaim_warning.py): when SIGUSR1 was last sent to it, and how many times.
    warned_at: datetime | None = None
    warnings: int = 0
    # Self-fencing (fence.py): when it was frozen (SIGSTOP) for a cut from the broker, None once
    # thawed; `fenced` once the fence killed it (its exit is then reported evicted).
    frozen_at: datetime | None = None
    fenced: bool = False
    # Set when the process ended (or could not start).
    exited_at: datetime | None = None
    exit_code: int | None = None
    exit_detail: str = ""
    exit_acked: bool = False

    @property
    def key(self) -> str:
        return worker_key(self.command_id, self.worker_index)

    @property
    def live(self) -> bool:
        return self.exited_at is None

    @property
    def pgid(self) -> int | None:
        # Every worker leads its own session and group (start_new_session): pgid == pid.
        return self.pid


class CommandEntry(BaseModel):
    """A verified command the agent accepted (forged or stale ones never get here)."""

    model_config = ConfigDict(extra="forbid")

    command_id: UUID
    kind: Literal["bind", "evict", "warn"]
    issued_at: datetime
    received_at: datetime
    state: Literal["accepted", "done"] = "accepted"
    # The W3C trace headers the command arrived with, so work resumed after a restart (and the
    # acks it publishes) continue the command's trace.
    trace_headers: list[tuple[str, str]] = Field(default_factory=list)
    # Eviction (and warning: the warned task and the workers signalled, in `targets`).
    task_ids: tuple[str, ...] = ()
    attempt: int | None = None  # the attempt the eviction stops (None: every run of its tasks)
    grace_seconds: float = 0.0
    targets: list[str] = Field(default_factory=list)  # worker keys running when it arrived
    sigterm_at: datetime | None = None  # the last SIGTERM it sent (the grace runs from there)
    failures: list[str] = Field(default_factory=list)  # signals the kernel refused
    ack: EvictAck | None = None
    ack_published: bool = False


class JournalState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = JOURNAL_VERSION
    node: str
    workers: dict[str, WorkerEntry] = Field(default_factory=dict)
    commands: dict[str, CommandEntry] = Field(default_factory=dict)
    # Tasks an EvictCommand named while none of their workers ran here: the eviction's command id
    # and issued_at. Bind and evict travel on different topics, so a bind issued before the
    # eviction may arrive after it; it must not start (see binds.py).
    evicted_unstarted: dict[str, tuple[UUID, datetime]] = Field(default_factory=dict)
    # Attempts an EvictCommand revoked, per task: attempt -> (the eviction's id, its issued_at).
    # A bind of a revoked attempt never starts, whatever order the two commands were read in
    # (docs/attempts.md); the timestamp rule above stays for commands without an attempt.
    revoked: dict[str, dict[int, tuple[UUID, datetime]]] = Field(default_factory=dict)


def worker_key(command_id: UUID, worker_index: int) -> str:
    return f"{command_id}/{worker_index}"


class Journal:
    """The in-memory state plus its file. Mutate `state`, then `save()` before acting on the
    assumption that the change survives a crash; or `mark()` it and let the next `flush()` write
    it, where losing the change in a crash is harmless (it is redone or re-sent after a restart).
    A save costs a few ms with hundreds of workers, so coalescing matters under a burst."""

    def __init__(self, path: Path, state: JournalState) -> None:
        self.path = path
        self.state = state
        self.saves = 0
        self.dirty = False

    @classmethod
    def open(cls, path: Path, *, node: str) -> Journal:
        """Load the journal at `path`, or start an empty one (the file appears on first save)."""
        if not path.exists():
            return cls(path, JournalState(node=node))
        try:
            state = JournalState.model_validate_json(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise JournalError(f"cannot read the agent journal {path}: {exc}") from exc
        if state.node != node:
            raise JournalError(f"the journal {path} belongs to node {state.node!r}, not {node!r}")
        return cls(path, state)

    def save(self) -> None:
        write_atomic(self.path, self.state.model_dump_json(indent=None).encode("utf-8"))
        self.saves += 1
        self.dirty = False

    def mark(self) -> None:
        self.dirty = True

    def flush(self) -> None:
        if self.dirty:
            self.save()

    # Queries -------------------------------------------------------------------------------------

    def command(self, command_id: UUID) -> CommandEntry | None:
        return self.state.commands.get(str(command_id))

    def workers_of_command(self, command_id: UUID) -> list[WorkerEntry]:
        return sorted(
            (w for w in self.state.workers.values() if w.command_id == command_id),
            key=lambda w: w.worker_index,
        )

    def live_workers(self, task_id: str | None = None) -> list[WorkerEntry]:
        return [
            w for w in self.state.workers.values() if w.live and (task_id is None or w.task_id == task_id)
        ]

    # Housekeeping --------------------------------------------------------------------------------

    def prune(self, older_than: datetime) -> int:
        """Forget answered commands issued before `older_than` and their ended, acknowledged
        workers. Returns how many commands were dropped."""
        dropped = 0
        for key, entry in list(self.state.commands.items()):
            if entry.state != "done" or entry.issued_at >= older_than:
                continue
            workers = self.workers_of_command(entry.command_id)
            if any(w.live or not w.exit_acked for w in workers):
                continue
            for worker in workers:
                del self.state.workers[worker.key]
            del self.state.commands[key]
            dropped += 1
        for task, (_, issued_at) in list(self.state.evicted_unstarted.items()):
            if issued_at < older_than:  # a bind older than that is rejected as stale anyway
                del self.state.evicted_unstarted[task]
        for task, attempts in list(self.state.revoked.items()):
            for attempt, (_, issued_at) in list(attempts.items()):
                # The service issues an attempt's eviction after its bind, so a bind of a revoked
                # attempt is older still, and refused as stale once the revocation is this old.
                if issued_at < older_than:
                    del attempts[attempt]
            if not attempts:
                del self.state.revoked[task]
        return dropped


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves the old or the new content, whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    # The rename is durable only once the directory entry is.
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
