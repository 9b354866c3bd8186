"""What `gfs livebench races` checks, from the topics and the agents' journals only (issue 22).

Pure: it takes the records read back from the topics and the agents' journal entries (merged
snapshots) and counts; the runner (`races.py`) collects them. The service's own view (Postgres,
its API) is not consulted, except by the runner to say whether an unfinished task is still held.

- GPUs bound twice, two ways:
  - *on the node* (the journals): per (node, GPU index), the lifetimes of the workers the agent
    really ran there, [started_at, exited_at] on the agent's clock; two workers alive at one
    instant whose shares sum above one GPU are a double bind;
  - *in the commands* (the topics): per (node, GPU index), each attempt's worker holds the GPU from
    its first BindCommand's `issued_at` until the `exited_at` its WorkerExited reports (open when
    none came); two such holds of different attempts at one instant are a double bind. The service
    may free GPUs on an EvictAck before the WorkerExited is read (the ack is sent after the exit),
    so this compares when the exit happened, not when it was read.
- Two runs of one task at once (issue 38 item 1), from the journals of every node: per task, the
  workers' lifetimes [started_at, exited_at] (a worker the self-fence froze and then killed ran
  until it was frozen: a stopped process executes nothing); two alive at one instant that belong
  to different attempts, or to one attempt's worker started twice, are two runs at once.
- False evictions: a TaskEvicted for an attempt whose every worker ran and exited without a signal
  from the agent (it ended on its own before the eviction was carried out), or for an attempt no
  BindCommand started, or a second TaskEvicted for one attempt; FAILED guarantee periods beyond the
  task's really evicted attempts.
- Unfinished: accepted, neither finished nor rejected (the runner asks whether they are held).

And what shows the races were really run: exits that raced an eviction (the worker ended on its
own before the eviction was issued, i.e. the service had not heard yet, or while it was on its way
to the agent), evictions the agent read before their bind (the worker never started: exit 127),
NOT_RUNNING acks, the acks' delays (record timestamp minus the envelope's `occurred_at`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand, EvictOutcome
from gfs.schemas.tasks import (
    GuaranteeOutcome,
    GuaranteePeriodClosed,
    TaskAccepted,
    TaskEvicted,
    TaskFinished,
    TaskRejected,
)
from gfs.schemas.workers import WorkerExited, WorkerStarted
from gfs.services.node_agent.journal import CommandEntry, WorkerEntry

T = TypeVar("T")
NOT_STARTED = 127  # the agent's exit code for a worker it never started (agent.NOT_STARTED_EXIT_CODE)
EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Seen:
    """One record read back: its topic, the record's timestamp (ms), the envelope's occurred_at."""

    topic: str
    timestamp_ms: int
    occurred_at: datetime
    payload: Any


@dataclass(slots=True)
class RaceReport:
    accepted: int = 0
    finished: int = 0
    rejected: int = 0
    unfinished: list[str] = field(default_factory=list)
    binds: int = 0
    binds_reissued: int = 0
    evictions: int = 0  # EvictCommands
    evictions_by_reason: Counter[str] = field(default_factory=Counter)
    task_evicted: int = 0
    not_running_acks: int = 0
    double_bound_on_node: list[str] = field(default_factory=list)
    double_bound_in_commands: list[str] = field(default_factory=list)
    two_runs_at_once: list[str] = field(default_factory=list)
    false_evictions: list[str] = field(default_factory=list)
    evicted_twice: list[str] = field(default_factory=list)
    finished_twice: list[str] = field(default_factory=list)
    false_failed_periods: list[str] = field(default_factory=list)
    unverified_evictions: list[str] = field(default_factory=list)  # no journal entry of the attempt
    genuine_evictions: int = 0
    gang_nodes_ended_on_their_own: int = 0  # a gang's TaskEvicted for a node whose worker had ended
    evicted_before_start: int = 0  # genuine: the agent read the eviction first, never started it
    exits_before_eviction_issued: int = 0
    exits_while_eviction_in_flight: int = 0
    evictions_raced_by_exit: int = 0
    evict_read_before_bind: int = 0
    workers_run: int = 0
    ack_delays_ms: list[float] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.double_bound_on_node or self.double_bound_in_commands or self.two_runs_at_once
            or self.false_evictions
            or self.evicted_twice or self.finished_twice or self.false_failed_periods
        )  # fmt: skip


def _overlaps(holds: Iterable[tuple[float, float, float, str]]) -> list[str]:
    """Holds (start, end, share, owner) of one GPU: the owners found alive together above one GPU,
    as "owner-a & owner-b" (one entry per hold that starts while the GPU is already full)."""
    out: list[str] = []
    active: list[tuple[float, float, str]] = []  # (end, share, owner)
    for start, end, share, owner in sorted(holds):
        active = [a for a in active if a[0] > start + EPS]  # ended at or before this start
        others = [a for a in active if a[2] != owner]
        if others and sum(a[1] for a in others) + share > 1.0 + EPS:
            out.append(f"{owner} & {others[0][2]}")
        active.append((end, share, owner))
    return out


def _two_runs(workers: dict[str, list[WorkerEntry]], end_s: float) -> list[str]:
    """Per task, workers alive together that are two runs (module doc), as "task: a & b"."""
    per_task: dict[str, list[tuple[float, float, tuple[int | None, int], str]]] = defaultdict(list)
    for node, entries in workers.items():
        for w in entries:
            if w.pid is None or w.started_at is None:
                continue
            ran_until = w.exited_at.timestamp() if w.exited_at is not None else end_s
            if w.fenced and w.frozen_at is not None:
                ran_until = min(ran_until, w.frozen_at.timestamp())
            run = (w.attempt, w.worker_index)
            name = f"#{w.attempt}/w{w.worker_index}@{node}"
            per_task[w.task_id].append((w.started_at.timestamp(), ran_until, run, name))
    out = []
    for task, holds in sorted(per_task.items()):
        holds.sort()
        for i, (_, end, run, name) in enumerate(holds):
            for start2, _, run2, name2 in holds[i + 1 :]:
                if start2 >= end - EPS:
                    break  # sorted by start: the rest start after this one ended
                if run2[0] != run[0] or run2 == run:
                    out.append(f"{task}: {name} & {name2}")
    return out


def _own_exit(w: WorkerEntry) -> bool:
    """The worker ran and ended without the agent signalling it."""
    return w.pid is not None and w.exited_at is not None and w.sigterm_at is None and w.sigkill_at is None


def _stopped(w: WorkerEntry) -> bool:
    """The eviction was carried out on it: signalled while running, or never started because the
    agent had read the eviction first."""
    signalled = w.sigterm_at is not None or w.sigkill_at is not None
    never = w.pid is None and w.exit_code == NOT_STARTED and w.evicting_command is not None
    return signalled or never


def _node_of(w: WorkerEntry, binds: dict[UUID, BindCommand]) -> str | None:
    bind = binds.get(w.command_id)
    return None if bind is None else bind.node


def check(
    records: Sequence[Seen],
    workers: dict[str, list[WorkerEntry]],
    commands: dict[str, list[CommandEntry]],
    *,
    end: datetime,
) -> RaceReport:
    """`workers`/`commands`: each node's journal entries (merged snapshots); `end`: when the
    observation stopped (a hold still open counts until then)."""
    report = RaceReport()
    end_s = end.timestamp()

    def of(kind: type[T]) -> list[T]:
        return [r.payload for r in records if isinstance(r.payload, kind)]

    binds: list[BindCommand] = of(BindCommand)
    evicts: list[EvictCommand] = of(EvictCommand)
    bind_by_id = {b.command_id: b for b in binds}
    evict_by_id = {e.command_id: e for e in evicts}

    # Lifecycle.
    accepted = {p.task_id for p in of(TaskAccepted)}
    finished_count = Counter(p.task_id for p in of(TaskFinished))
    rejected = {p.task_id for p in of(TaskRejected)}
    report.accepted, report.rejected = len(accepted), len(rejected & accepted)
    report.finished = len(set(finished_count) & accepted)
    report.unfinished = sorted(accepted - set(finished_count) - rejected)
    report.finished_twice = sorted(t for t, n in finished_count.items() if n > 1)

    # Commands and acks.
    report.binds = len(bind_by_id)
    per_worker: Counter[tuple[str, int | None, int]] = Counter()
    for b in bind_by_id.values():
        for p in b.placements:
            per_worker[(b.task_id, b.attempt, p.worker_index)] += 1
    report.binds_reissued = sum(n - 1 for n in per_worker.values())
    report.evictions = len(evict_by_id)
    report.evictions_by_reason = Counter(str(e.reason) for e in evict_by_id.values())
    report.not_running_acks = sum(1 for a in of(EvictAck) if a.outcome is EvictOutcome.NOT_RUNNING)
    for r in records:
        if isinstance(r.payload, WorkerStarted | WorkerExited | EvictAck):
            report.ack_delays_ms.append(r.timestamp_ms - r.occurred_at.timestamp() * 1000.0)

    # (a) on the node: the workers' real lifetimes per GPU.
    for node, entries in sorted(workers.items()):
        holds: dict[int, list[tuple[float, float, float, str]]] = defaultdict(list)
        for w in entries:
            if w.pid is None or w.started_at is None:
                continue
            report.workers_run += 1
            stop = w.exited_at.timestamp() if w.exited_at is not None else end_s
            owner = f"{w.task_id}#{w.attempt}/w{w.worker_index}@{w.started_at.timestamp():.3f}"
            for gpu in w.gpu_indices:
                holds[gpu].append((w.started_at.timestamp(), stop, w.gpu_fraction, owner))
        for gpu, found in sorted(holds.items()):
            report.double_bound_on_node += [f"{node} GPU {gpu}: {pair}" for pair in _overlaps(found)]

    report.two_runs_at_once = _two_runs(workers, end_s)

    # (a) in the commands: bind issued -> reported exit, per GPU.
    exits: dict[tuple[str, int | None, int], float] = {}
    for x in of(WorkerExited):
        attempt = x.attempt
        if attempt is None and x.command_id in bind_by_id:
            attempt = bind_by_id[x.command_id].attempt
        key = (x.task_id, attempt, x.worker_index)
        exits[key] = min(exits.get(key, float("inf")), x.exited_at.timestamp())
    first_bind: dict[tuple[str, int | None, int], tuple[float, BindCommand]] = {}
    for b in bind_by_id.values():
        for p in b.placements:
            key = (b.task_id, b.attempt, p.worker_index)
            if key not in first_bind or b.issued_at.timestamp() < first_bind[key][0]:
                first_bind[key] = (b.issued_at.timestamp(), b)
    by_gpu: dict[tuple[str, int], list[tuple[float, float, float, str]]] = defaultdict(list)
    for key, (issued, b) in first_bind.items():
        placement = next(p for p in b.placements if p.worker_index == key[2])
        stop = exits.get(key, end_s)
        for gpu in placement.gpu_indices:
            owner = f"{key[0]}#{key[1]}/w{key[2]}"
            by_gpu[(placement.node, gpu)].append((issued, stop, placement.gpu_fraction, owner))
    for (node, gpu), found in sorted(by_gpu.items()):
        report.double_bound_in_commands += [f"{node} GPU {gpu}: {pair}" for pair in _overlaps(found)]

    # Ground truth per attempt, from the journals.
    runs: dict[tuple[str, int | None], list[WorkerEntry]] = defaultdict(list)
    for entries in workers.values():
        for w in entries:
            runs[(w.task_id, w.attempt)].append(w)
    report.evict_read_before_bind = sum(
        1
        for ws in runs.values()
        for w in ws
        if w.pid is None and w.exit_code == NOT_STARTED and w.evicting_command is not None
    )

    def attempt_of(command: EvictCommand, task: str) -> int | None:
        if command.attempt is not None:
            return command.attempt
        earlier = [b.attempt for b in binds if b.task_id == task and b.issued_at <= command.issued_at]
        return max((a for a in earlier if a is not None), default=None)

    # (b) every TaskEvicted against what the agents did.
    # One TaskEvicted per eviction command, so per node: a gang on two nodes has two.
    evicted_attempts: Counter[tuple[str, int | None, str]] = Counter()
    genuine: set[tuple[str, int | None]] = set()
    for ev in of(TaskEvicted):
        report.task_evicted += 1
        command = evict_by_id.get(ev.command_id)
        attempt = attempt_of(command, ev.task_id) if command is not None else None
        label = f"{ev.task_id}#{attempt} ({ev.reason}, {ev.command_id})"
        evicted_attempts[(ev.task_id, attempt, ev.node)] += 1
        if evicted_attempts[(ev.task_id, attempt, ev.node)] == 2:
            report.evicted_twice.append(label)
        if evicted_attempts[(ev.task_id, attempt, ev.node)] > 1:
            continue
        # Judged per attempt (docs/attempts.md): a gang whose workers ended differently, one on its
        # own and one stopped, was evicted; its command to the node where the worker had already
        # ended still gets its TaskEvicted (one per command), counted apart.
        ran = runs.get((ev.task_id, attempt), [])
        here = [w for w in ran if _node_of(w, bind_by_id) == ev.node]
        if here and all(_own_exit(w) for w in here) and not all(_own_exit(w) for w in ran):
            report.gang_nodes_ended_on_their_own += 1
        bound = any(k[0] == ev.task_id and k[1] == attempt for k in first_bind)
        if not ran:
            (report.unverified_evictions if bound else report.false_evictions).append(
                label + ("" if bound else ": no bind of this attempt")
            )
        elif all(_own_exit(w) for w in ran):
            codes = ",".join(str(w.exit_code) for w in ran)
            report.false_evictions.append(f"{label}: every worker exited on its own (codes {codes})")
        elif any(_stopped(w) for w in ran):
            report.genuine_evictions += 1
            genuine.add((ev.task_id, attempt))
            if all(w.pid is None for w in ran):
                report.evicted_before_start += 1
        else:
            report.false_evictions.append(f"{label}: its workers were never stopped by the agent")
    # A FAILED period says "evicted inside the period": one per really evicted attempt. An
    # attempt's eviction is decided with its period closed at the same instant, so a FAILED
    # period whose end is no eviction command's issued_at stopped nothing that ran.
    evicted_at = {(t, e.issued_at) for e in evict_by_id.values() for t in e.task_ids}
    failed: dict[str, list[GuaranteePeriodClosed]] = defaultdict(list)
    for closed in of(GuaranteePeriodClosed):
        if closed.outcome is GuaranteeOutcome.FAILED:
            failed[closed.task_id].append(closed)
    for task, periods in sorted(failed.items()):
        really = sum(1 for t, _ in genuine if t == task)
        if len(periods) > really:
            orphans = sum(1 for c in periods if (task, c.period_end) not in evicted_at)
            report.false_failed_periods.append(
                f"{task}: {len(periods)} FAILED periods, {really} evicted attempts "
                f"({orphans} closed with no eviction command)"
            )

    # Races exercised: own exits against the evictions that named their attempt.
    received: dict[tuple[str, UUID], datetime] = {}
    for node, accepted_commands in commands.items():
        for c in accepted_commands:
            received[(node, c.command_id)] = c.received_at
    for command in evict_by_id.values():
        raced = False
        for task in command.task_ids:
            attempt = attempt_of(command, task)
            for w in runs.get((task, attempt), []):
                if not _own_exit(w) or w.command_id not in bind_by_id:
                    continue
                if bind_by_id[w.command_id].node != command.node or w.exited_at is None:
                    continue
                got = received.get((command.node, command.command_id))
                if w.exited_at < command.issued_at:
                    report.exits_before_eviction_issued += 1
                    raced = True
                elif got is None or w.exited_at <= got:
                    report.exits_while_eviction_in_flight += 1
                    raced = True
        report.evictions_raced_by_exit += raced
    return report
