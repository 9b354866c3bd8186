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
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol
from uuid import UUID

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.metrics import Counter, Histogram, Meter

from schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome
from schemas.envelope import Envelope, wrap
from schemas.fields import scrub_text
from schemas.telemetry import GpuAllocation, GpuProcess, GpuSample, NodeTelemetry, RunningWorker
from schemas.workers import WorkerExited, WorkerStarted
from services.node_agent import procs
from services.node_agent.clock_ticks import ClockTicks
from services.node_agent.gpu import GpuBackend
from services.node_agent.journal import CommandEntry, Journal, WorkerEntry
from services.node_agent.paths import path_part
from services.node_agent.security import CommandGuard, Rejection
from services.node_agent.sim_clock import SimClock
from services.node_agent.worker_env import strip_secrets, worker_environment
from services.platform.signing import sign
from services.platform.tracing import extract_context

log = logging.getLogger(__name__)

PRODUCER = "gfs-node-agent"
TRACER = "gfs.node_agent"
ACK_TOPIC = "gfs.commands.worker-ack"
EVICT_ACK_TOPIC = "gfs.commands.evict-ack"
TELEMETRY_TOPIC = "gfs.nodes.telemetry"

# A re-adopted worker is not the new agent's child, so its exit status cannot be collected
# (only a parent may wait for it). Its WorkerExited carries this code and says so in `detail`.
UNKNOWN_EXIT_CODE = -1
UNKNOWN_EXIT_DETAIL = "exit status unknown: the worker was re-adopted after an agent restart"
NOT_STARTED_EXIT_CODE = 127  # the shell's "command not found" status, as WorkerExited documents
# The environment marker that finds a worker forked just before the agent died (see procs).
WORKER_MARKER = "GFS_AGENT_WORKER"
# What a worker learns of the controllable clock and of its restart (see `_start`).
SIM_ENV = ("GFS_SIM_CLOCK_FILE", "GFS_SIM_START", "GFS_CLOCK_SEEN_FILE")
# How often an ADVANCE looks at the workers' clock-seen files (a tick's latency is mostly this).

_LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def utc_now() -> datetime:
    return datetime.now(UTC)


class AckSink(Protocol):
    """Where acks and telemetry go (`EnvelopeProducer` in the service, a list in unit tests). The
    current OpenTelemetry context travels with each message (the producer injects it)."""

    async def send(self, topic_name: str, envelope: Envelope[Any]) -> object: ...


@dataclass(slots=True)
class AgentMetrics:
    rejected: Counter
    commands: Counter
    sigterm_latency: Histogram
    sigterm_since_issued: Histogram
    # Plain counts, for logs and tests (the OTel instruments are write-only).
    rejections: collections.Counter[str]

    @classmethod
    def create(cls, meter: Meter) -> AgentMetrics:
        return cls(
            rejected=meter.create_counter(
                "gfs_agent_commands_rejected", description="Commands refused by the node agent, by reason."
            ),
            commands=meter.create_counter(
                "gfs_agent_commands", description="Commands handled by the node agent, by kind and result."
            ),
            sigterm_latency=meter.create_histogram(
                "gfs_agent_sigterm_latency_seconds",
                unit="s",
                description="Eviction command received -> SIGTERM sent to its workers.",
                explicit_bucket_boundaries_advisory=_LATENCY_BUCKETS_S,
            ),
            sigterm_since_issued=meter.create_histogram(
                "gfs_agent_sigterm_since_issued_seconds",
                unit="s",
                description="Eviction command issued_at (scheduler clock) -> SIGTERM sent.",
                explicit_bucket_boundaries_advisory=_LATENCY_BUCKETS_S,
            ),
            rejections=collections.Counter(),
        )


class NodeAgent(ClockTicks):
    def __init__(
        self,
        *,
        node: str,
        backend: GpuBackend,
        gpu_model: str,
        journal: Journal,
        guard: CommandGuard,
        sink: AckSink,
        metrics: AgentMetrics,
        log_dir: Path,
        clock: Callable[[], datetime] = utc_now,
        watch_s: float = 0.05,
        kill_wait_s: float = 10.0,
        worker_env: dict[str, str] | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        wall_clock: Callable[[], datetime] | None = None,
        sim_clock: SimClock | None = None,
        checkpoint_root: Path | None = None,
        clock_wait_s: float = 30.0,
    ) -> None:
        """`clock` is the agent's time (acks, command freshness): the sim clock's `now` in topic
        mode. `wall_clock` (default: `clock`) stamps the heartbeats, which stay on real time.
        `checkpoint_root`: workers get GFS_CHECKPOINT_DIR=<root>/<task>/<worker> (None: the
        variable is left as the agent's environment has it)."""
        self.node = node
        self.backend = backend
        self.gpu_model = gpu_model
        self.journal = journal
        self.guard = guard
        self.sink = sink
        self.metrics = metrics
        self.log_dir = log_dir
        self.clock = clock
        self.wall_clock = wall_clock or clock
        self.sim_clock = sim_clock
        self.checkpoint_root = checkpoint_root
        self.clock_wait_s = clock_wait_s
        self.watch_s = watch_s
        self.kill_wait_s = kill_wait_s
        # The base environment of workers (default: the allowed part of the agent's own, never a
        # key or the database URL: worker_env.py).
        self.worker_env = worker_environment(os.environ) if worker_env is None else dict(worker_env)
        self.tracer = trace.get_tracer(TRACER, tracer_provider=tracer_provider)
        self._children: dict[str, Any] = {}  # worker key -> subprocess.Popen (our own children)
        self._exited: dict[str, asyncio.Event] = {}
        self.evictions: dict[UUID, asyncio.Task[None]] = {}
        self._last_prune = clock()
        # The watcher and a clock tick both reap and report exits; one at a time, so an exit is
        # published once and a tick's reap waits for the watcher's publishes in flight.
        self._polling = asyncio.Lock()

    # Commands ----------------------------------------------------------------------------------

    async def handle(
        self, envelope: Envelope[Any], *, headers: Sequence[tuple[str, bytes]] = (), received_at: datetime
    ) -> None:
        """Act on one command read from this node's partition; never raises for a bad command."""
        command = envelope.payload
        if not isinstance(command, BindCommand | EvictCommand):
            return
        kind = "bind" if isinstance(command, BindCommand) else "evict"
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
        else:
            await self._evict(command, trace_headers, received_at)
        self.metrics.commands.add(1, {"kind": kind, "result": "accepted"})

    def reject(self, reason: Rejection, detail: str) -> None:
        self.metrics.rejections[reason] += 1
        self.metrics.rejected.add(1, {"reason": str(reason)})
        log.warning("command rejected reason=%s %s", reason, detail)

    async def _answer_again(self, seen: CommandEntry) -> None:
        if seen.kind == "bind":
            for worker in self.journal.workers_of_command(seen.command_id):
                if worker.pid is not None:
                    await self._publish(ACK_TOPIC, self._started(worker), seen)
                elif worker.exit_code == NOT_STARTED_EXIT_CODE:
                    await self._publish(ACK_TOPIC, self._exited_ack(worker), seen)
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
                await self._publish(ACK_TOPIC, self._started(worker), entry)
        for worker in workers:
            if worker.pid is not None:
                await self._publish(ACK_TOPIC, self._started(worker), entry)
                worker.started_acked = True  # only now may the watcher report its exit
            else:
                worker.exit_acked = True  # set first so the watcher does not report it too
                await self._publish(ACK_TOPIC, self._exited_ack(worker), entry)

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

    # Evict -------------------------------------------------------------------------------------

    async def _evict(
        self, command: EvictCommand, headers: list[tuple[str, str]], received_at: datetime
    ) -> None:
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

    def _finish_later(self, entry: CommandEntry) -> None:
        # Runs in the current context (the command's span), so its ack continues the same trace.
        task = asyncio.create_task(self._finish_eviction(entry), name=f"evict-{entry.command_id}")
        self.evictions[entry.command_id] = task
        task.add_done_callback(lambda _: self.evictions.pop(entry.command_id, None))

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
            await self._wait_exited(targets, wait_s)
            remaining = [w for w in targets if w.live]
            if remaining:
                with self.tracer.start_as_current_span(
                    "agent.sigkill", attributes={"gfs.workers": len(remaining)}
                ):
                    self._signal(entry, remaining, signal.SIGKILL)
                self.journal.mark()
                await self._wait_exited(remaining, self.kill_wait_s)
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
            await self._publish(EVICT_ACK_TOPIC, entry.ack, entry)
        except Exception as exc:  # the watcher retries it (see publish_pending)
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
                self._publish(ACK_TOPIC, self._exited_ack(w), self.journal.command(w.command_id))
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

    # Restart -----------------------------------------------------------------------------------

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
                await self._publish(ACK_TOPIC, self._started(worker), self.journal.command(worker.command_id))
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

    # Telemetry ---------------------------------------------------------------------------------

    def telemetry(self) -> NodeTelemetry:
        """One sample of every GPU, with the shares the agent's running workers hold."""
        shares: dict[int, dict[str, float]] = collections.defaultdict(dict)
        task_of_group: dict[int, str] = {}
        for worker in self.journal.live_workers():
            if worker.pid is None:
                continue
            task_of_group[worker.pid] = worker.task_id
            for index in worker.gpu_indices:
                held = shares[index].get(worker.task_id, 0.0)
                shares[index][worker.task_id] = min(1.0, held + worker.gpu_fraction)
        samples = []
        for reading in self.backend.read():
            allocations: list[GpuAllocation] = []
            total = 0.0
            for task_id, fraction in sorted(shares.get(reading.index, {}).items()):
                if total + fraction > 1.0 + 1e-6:
                    log.warning(
                        "GPU %d over-allocated: %s's share left out of telemetry", reading.index, task_id
                    )
                    continue
                total += fraction
                allocations.append(GpuAllocation(task_id=task_id, fraction=fraction))
            samples.append(
                GpuSample(
                    index=reading.index,
                    utilisation_pct=reading.utilisation_pct,
                    memory_used_mib=reading.memory_used_mib,
                    memory_total_mib=reading.memory_total_mib,
                    processes=tuple(
                        GpuProcess(pid=pid, task_id=_task_of(pid, task_of_group), used_memory_mib=used)
                        for pid, used in reading.processes
                    ),
                    allocations=tuple(allocations),
                )
            )
        # The report of what runs here (reconciliation, services/preemption/reconcile.py): every
        # live worker with its attempt, also one still starting.
        running = tuple(
            RunningWorker(task_id=w.task_id, attempt=w.attempt, worker_index=w.worker_index)
            for w in sorted(
                self.journal.live_workers(), key=lambda w: (w.task_id, w.attempt or 0, w.worker_index)
            )
        )
        return NodeTelemetry(
            node=self.node, gpu_model=self.gpu_model, sampled_at=self.wall_clock(), gpus=tuple(samples),
            running=running,
        )  # fmt: skip

    async def publish_telemetry(self) -> None:
        # The heartbeat stays on the wall clock in topic mode: it says the node is alive now.
        # Signed like every report (the heartbeat, capacity and `running` drive decisions).
        sample = sign(self.telemetry(), key=self.guard.key)
        await self.sink.send(TELEMETRY_TOPIC, wrap(sample, producer=PRODUCER, occurred_at=self.wall_clock()))

    # Helpers -----------------------------------------------------------------------------------

    def _started(self, worker: WorkerEntry) -> WorkerStarted:
        assert worker.pid is not None and worker.started_at is not None
        return WorkerStarted(
            command_id=worker.command_id,
            node=self.node,
            task_id=worker.task_id,
            worker_index=worker.worker_index,
            pid=worker.pid,
            started_at=worker.started_at,
            attempt=worker.attempt,
        )

    def _exited_ack(self, worker: WorkerEntry) -> WorkerExited:
        assert worker.exited_at is not None and worker.exit_code is not None
        return WorkerExited(
            command_id=worker.command_id,
            node=self.node,
            task_id=worker.task_id,
            worker_index=worker.worker_index,
            exit_code=worker.exit_code,
            exited_at=worker.exited_at,
            evicted=worker.evicting_command is not None,
            detail=worker.exit_detail,
            attempt=worker.attempt,
        )

    @contextlib.contextmanager
    def _in_trace_of(self, entry: CommandEntry | None) -> Any:
        """Continue the trace the command arrived with (stored in the journal)."""
        if entry is None or not entry.trace_headers:
            yield
            return
        carried = [(name, value.encode("utf-8")) for name, value in entry.trace_headers]
        token = otel_context.attach(extract_context(carried))
        try:
            yield
        finally:
            otel_context.detach(token)

    async def _publish(self, topic_name: str, payload: Any, entry: CommandEntry | None) -> None:
        # Inside the command's span when called from `handle` (the current context); otherwise
        # (watcher, recovery) the command's stored trace headers give the parent.
        current = trace.get_current_span().get_span_context()
        parent = contextlib.nullcontext() if current.is_valid else self._in_trace_of(entry)
        with (
            parent,
            self.tracer.start_as_current_span(
                f"agent.publish {type(payload).__name__}", kind=trace.SpanKind.PRODUCER
            ),
        ):
            signed = sign(payload, key=self.guard.key)  # the scheduler applies only its node's word
            await self.sink.send(topic_name, wrap(signed, producer=PRODUCER, occurred_at=self.clock()))


def _task_of(pid: int, task_of_group: dict[int, str]) -> str | None:
    # NVML lists the process using the GPU, often a child of the worker: map it by process group.
    with contextlib.suppress(OSError):
        return task_of_group.get(os.getpgid(pid))
    return None
