"""Worker supervision: start a bound worker (its environment, GPUs, clock and checkpoint folder),
watch the workers for exit, and publish what was recorded but not yet published.

Part of the node agent (agent.py): a class over `AgentBase`, below eviction and recovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

from schemas.commands import BindCommand
from schemas.fields import scrub_text
from schemas.topics import EVICT_ACK_TOPIC, WORKER_ACK_TOPIC
from services.node_agent import procs
from services.node_agent.agent_base import (
    NOT_STARTED_EXIT_CODE,
    SIM_ENV,
    UNKNOWN_EXIT_CODE,
    UNKNOWN_EXIT_DETAIL,
    WORKER_MARKER,
    AgentBase,
)
from services.node_agent.journal import WorkerEntry
from services.node_agent.paths import path_part
from services.node_agent.worker_env import strip_secrets

# Every part of the agent logs under the one logger name it always had, so a deployment's log
# filters (and tests' caplog) see the same records whichever module emits them.
log = logging.getLogger("services.node_agent.agent")


class WorkerSupervision(AgentBase):
    def _start(self, command: BindCommand, worker: WorkerEntry) -> None:
        now = self.clock()
        missing = [i for i in worker.gpu_indices if i >= self.backend.count]
        if missing:
            self._not_started(
                worker, now, f"GPU indices {missing} do not exist on this node ({self.backend.count} GPUs)"
            )
            return
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
        try:
            process = procs.spawn(command.command, env=env, log_path=Path(worker.log_path))
        except OSError as exc:
            self._not_started(worker, now, f"cannot start {procs.describe(command.command)[:200]}: {exc}")
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

    def _not_started(self, worker: WorkerEntry, now: datetime, detail: str) -> None:
        # Scrubbed: the detail echoes OS errors, and WorkerExited.detail refuses control characters.
        worker.exited_at, worker.exit_code = now, NOT_STARTED_EXIT_CODE
        worker.exit_detail = scrub_text(detail)[:2000]
        log.warning("task=%s worker=%d not started: %s", worker.task_id, worker.worker_index, detail)

    async def _wait_exited(self, workers: Sequence[WorkerEntry], timeout_s: float) -> None:
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

    # Watching workers --------------------------------------------------------------------------

    async def watch(self, stop: asyncio.Event) -> None:
        """Poll the workers for exit until `stop`; report each exit; prune the journal now and then."""
        while not stop.is_set():
            await self.poll_workers()
            self.journal.flush()
            now = self.clock()
            # abs: a sim clock may start behind the wall clock the agent started on.
            if abs(now - self._last_prune) > timedelta(seconds=60):
                self._last_prune = now
                if self.journal.prune(now - self.guard.max_age - self.guard.clock_skew):
                    self.journal.save()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.watch_s)

    async def poll_workers(self) -> None:
        async with self._polling:
            await self._poll_workers()

    async def _poll_workers(self) -> None:
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
                worker.exit_code, worker.exit_detail = UNKNOWN_EXIT_CODE, UNKNOWN_EXIT_DETAIL
            worker.exited_at = self.clock()
            ended.append(worker)
        if ended:
            self.journal.save()  # the exit status is on disk before anyone is told
            for worker in ended:
                self._exit_event(worker.key).set()
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
        await self.publish_pending()

    async def publish_pending(self) -> None:
        """Acks recorded but not yet published: worker exits, and eviction acks whose publish
        failed. A WorkerExited waits for its WorkerStarted, so the two never arrive swapped."""
        for entry in self.journal.state.commands.values():
            if entry.ack is not None and not entry.ack_published and entry.command_id not in self.evictions:
                with contextlib.suppress(Exception):
                    await self._publish(EVICT_ACK_TOPIC, entry.ack, entry)
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
                self._publish(WORKER_ACK_TOPIC, self._exited_ack(w), self.journal.command(w.command_id))
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
