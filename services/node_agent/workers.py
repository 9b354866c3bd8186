"""Worker supervision: start a bound worker (its environment, GPUs, clock and checkpoint folder),
notice when it ends, and let others wait for that.

`WorkerSupervisor` owns the processes the agent started: its children (`subprocess.Popen`, only a
parent may reap them) and one exit event per worker key. It records what it sees on the workers'
journal entries (pid, start, exit) but publishes nothing: reporting exits is the watcher's job
(watcher.py), which calls `reap`. Binds start workers through it, the evictor waits on it, the
clock ticks ask it whether a worker is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from gfs.schemas.commands import BindCommand
from gfs.schemas.fields import scrub_text
from gfs.services.node_agent import procs
from gfs.services.node_agent.journal import Journal, WorkerEntry
from gfs.services.node_agent.paths import path_part
from gfs.services.node_agent.sim_clock import SimClock
from gfs.services.node_agent.worker_env import strip_secrets

# Every part of the agent logs under the one logger name it always had, so a deployment's log
# filters (and tests' caplog) see the same records whichever module emits them.
log = logging.getLogger("gfs.services.node_agent.agent")

# A re-adopted worker is not the new agent's child, so its exit status cannot be collected
# (only a parent may wait for it). Its WorkerExited carries this code and says so in `detail`.
UNKNOWN_EXIT_CODE = -1
UNKNOWN_EXIT_DETAIL = "exit status unknown: the worker was re-adopted after an agent restart"
NOT_STARTED_EXIT_CODE = 127  # the shell's "command not found" status, as WorkerExited documents
# The environment marker that finds a worker forked just before the agent died (see procs).
WORKER_MARKER = "GFS_AGENT_WORKER"
# What a worker learns of the controllable clock and of its restart (see `start`).
SIM_ENV = ("GFS_SIM_CLOCK_FILE", "GFS_SIM_START", "GFS_CLOCK_SEEN_FILE")


def mark_not_started(worker: WorkerEntry, now: datetime, detail: str) -> None:
    """Record on `worker` that it never ran (exit 127 with the reason)."""
    # Scrubbed: the detail echoes OS errors, and WorkerExited.detail refuses control characters.
    worker.exited_at, worker.exit_code = now, NOT_STARTED_EXIT_CODE
    worker.exit_detail = scrub_text(detail)[:2000]
    log.warning("task=%s worker=%d not started: %s", worker.task_id, worker.worker_index, detail)


class WorkerSupervisor:
    """The processes this agent started (module doc).

    `worker_env` is the base environment of every worker (already the allowed part of the agent's
    own: worker_env.py); `checkpoint_root` (None: left as `worker_env` has it) gives each worker
    GFS_CHECKPOINT_DIR=<root>/<task>/<worker>; `sim_clock` (topic mode) tells workers where the
    controllable clock is. `clock` is the agent's time."""

    def __init__(
        self,
        *,
        node: str,
        gpu_count: int,
        journal: Journal,
        clock: Callable[[], datetime],
        worker_env: dict[str, str],
        sim_clock: SimClock | None = None,
        checkpoint_root: Path | None = None,
    ) -> None:
        self.node = node
        self.gpu_count = gpu_count
        self.journal = journal
        self.clock = clock
        self.worker_env = worker_env
        self.sim_clock = sim_clock
        self.checkpoint_root = checkpoint_root
        self._children: dict[str, Any] = {}  # worker key -> subprocess.Popen (our own children)
        self._exited: dict[str, asyncio.Event] = {}

    def start(self, command: BindCommand, worker: WorkerEntry) -> None:
        """Fork `worker` of `command`; on success its pid and start are on the entry (not yet saved)."""
        now = self.clock()
        missing = [i for i in worker.gpu_indices if i >= self.gpu_count]
        if missing:
            mark_not_started(
                worker, now, f"GPU indices {missing} do not exist on this node ({self.gpu_count} GPUs)"
            )
            return
        env = self._environment(command, worker)
        try:
            process = procs.spawn(command.command, env=env, log_path=Path(worker.log_path))
        except OSError as exc:
            mark_not_started(worker, now, f"cannot start {procs.describe(command.command)[:200]}: {exc}")
            return
        worker.pid = process.pid
        worker.start_ticks = procs.start_ticks(process.pid)
        worker.started_at = now
        self._children[worker.key] = process
        log.info(
            "started task=%s worker=%d pid=%d gpus=%s",
            worker.task_id,
            worker.worker_index,
            process.pid,
            env["CUDA_VISIBLE_DEVICES"],
        )

    def _environment(self, command: BindCommand, worker: WorkerEntry) -> dict[str, str]:
        env = dict(self.worker_env)
        env.update(
            CUDA_VISIBLE_DEVICES=",".join(str(i) for i in worker.gpu_indices),
            GFS_TASK_ID=command.task_id,
            GFS_WORKER_INDEX=str(worker.worker_index),
            GFS_COMMAND_ID=str(command.command_id),
            GFS_NODE=self.node,
            GFS_TASK_CLASS=str(command.task_class),
        )
        env[WORKER_MARKER] = f"{self.node}/{worker.key}"
        if command.checkpoint_interval_s is not None:
            env["GFS_CHECKPOINT_INTERVAL_S"] = repr(command.checkpoint_interval_s)
        else:
            env.pop("GFS_CHECKPOINT_INTERVAL_S", None)
        if command.restart_overhead_s is not None:
            env["GFS_RESTART_OVERHEAD_S"] = repr(command.restart_overhead_s)
        else:
            env.pop("GFS_RESTART_OVERHEAD_S", None)
        if self.checkpoint_root is not None:
            folder = self.checkpoint_root / path_part(worker.task_id) / str(worker.worker_index)
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # the task may still run without; its checkpoints will fail loudly
                log.warning("cannot create checkpoint folder %s: %s", folder, exc)
            env["GFS_CHECKPOINT_DIR"] = str(folder)
        for name in SIM_ENV:  # never inherited: a wall-clock agent's workers run on the wall clock
            env.pop(name, None)
        if self.sim_clock is not None:
            env["GFS_SIM_CLOCK_FILE"] = str(self.sim_clock.path)
            env["GFS_SIM_START"] = repr(self.sim_clock.epoch())
            env["GFS_CLOCK_SEEN_FILE"] = str(self.sim_clock.seen_file(worker.command_id, worker.worker_index))
        strip_secrets(env)  # whatever `worker_env` held, no worker sees the keys or the database URL
        return env

    async def wait_exited(self, workers: Sequence[WorkerEntry], timeout_s: float) -> None:
        """Until each live one of `workers` was reaped, or `timeout_s` passed."""
        waits = [self._exit_event(w.key).wait() for w in workers if w.live]
        if not waits:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*waits), timeout=max(0.0, timeout_s))

    def _exit_event(self, key: str) -> asyncio.Event:
        event = self._exited.get(key)
        if event is None:
            event = self._exited[key] = asyncio.Event()
        return event

    def has_ended(self, worker: WorkerEntry) -> bool:
        """The worker's process ended (reaped or not yet)."""
        if not worker.live:
            return True
        process = self._children.get(worker.key)
        if process is not None:
            return process.poll() is not None  # reaps it; `reap` reads the same code
        return (
            worker.start_ticks is None
            or worker.pid is None
            or not procs.is_running(worker.pid, worker.start_ticks)
        )

    def reap(self) -> list[WorkerEntry]:
        """Record the exit of every live worker that ended (journal saved before it returns, exit
        events set); returns them. A re-adopted worker's exit status is unknown (see above)."""
        ended: list[WorkerEntry] = []
        for worker in self.journal.live_workers():
            if worker.pid is None or worker.start_ticks is None:
                continue
            process = self._children.get(worker.key)
            if process is not None:
                code = process.poll()  # reaps our own child (no zombie left behind)
                if code is None:
                    continue
                worker.exit_code = code
                self._children.pop(worker.key, None)
            elif procs.is_running(worker.pid, worker.start_ticks):
                continue
            else:
                # A detail already set (the fence's kill, fence.py) says more than "unknown".
                worker.exit_code = UNKNOWN_EXIT_CODE
                worker.exit_detail = worker.exit_detail or UNKNOWN_EXIT_DETAIL
            worker.exited_at = self.clock()
            ended.append(worker)
        if ended:
            self.journal.save()  # the exit status is on disk before anyone is told
            for worker in ended:
                # Set for whoever waits, and dropped: one event per worker ever run was the
                # agent's slow growth in the hour's soak (issue 38 item 4).
                waiting = self._exited.pop(worker.key, None)
                if waiting is not None:
                    waiting.set()
                if self.sim_clock is not None:
                    with contextlib.suppress(OSError):
                        self.sim_clock.seen_file(worker.command_id, worker.worker_index).unlink()
                log.info(
                    "exited task=%s worker=%d pid=%s code=%s evicted=%s",
                    worker.task_id,
                    worker.worker_index,
                    worker.pid,
                    worker.exit_code,
                    worker.evicting_command is not None,
                )
        return ended
