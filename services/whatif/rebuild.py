"""The live log as a simulator trace, and what happened to its tasks (pure: no I/O).

- Nodes: each node's first telemetry sample in the log (its GPU model = its pool, its GPU count),
  in the order they first reported (the live service numbers a pool's nodes in join order, the
  simulator in the trace's order).
- Jobs: each TaskSubmitted (the first per task id): its shape, class, guarantee, checkpoint
  interval and duration (`expected_duration_s`; without one, the run time of a task that finished
  without eviction; otherwise it cannot be replayed and is left out, counted), submitted at its
  envelope's `occurred_at`; a TaskCancelled gives its `cancel_s`.
- What happened: per task, its starts, evictions, withdrawal and finish from the lifecycle topic,
  at the times the events carry.
Times become seconds since the trace's t = 0: the whole hour at or before the first submission,
so the simulator's hourly demand series line up with the live forecaster's hours.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gfs.schemas.tasks import (
    EvictionReason,
    TaskCancelled,
    TaskClass,
    TaskEvicted,
    TaskFinished,
    TaskRejected,
    TaskStarted,
    TaskSubmitted,
    TaskWithdrawn,
)
from gfs.schemas.telemetry import NodeTelemetry
from gfs.services.simulator.traces.gfs_format import DEFAULT_CHECKPOINT_S
from gfs.services.simulator.traces.records import Trace, TraceJob, TraceNode
from gfs.services.whatif.log_reader import LogRecord
from gfs.services.whatif.outcomes import Event, TaskInfo

NODE_CPUS = 10**6  # the live service does not schedule CPUs: nodes never run out of them


@dataclass(slots=True)
class Rebuilt:
    trace: Trace
    origin_s: float  # epoch seconds of the trace's t = 0
    end_s: float  # the log's last event, seconds since t = 0
    tasks: dict[str, TaskInfo]  # the replayed tasks (accepted: never rejected)
    happened: dict[str, list[tuple[float, Event]]]  # per task, its life events in log order
    left_out: dict[str, int] = field(default_factory=dict)

    @property
    def span_s(self) -> float:
        return self.end_s - min((info.submit_s for info in self.tasks.values()), default=self.end_s)


def _lifecycle_event(payload: object) -> tuple[str, float, Event] | None:
    if isinstance(payload, TaskStarted):
        return payload.task_id, payload.started_at.timestamp(), Event.START
    if isinstance(payload, TaskEvicted):
        if payload.reason is EvictionReason.CANCELLED or not payload.requeued:
            return payload.task_id, payload.evicted_at.timestamp(), Event.STOP
        return payload.task_id, payload.evicted_at.timestamp(), Event.EVICT
    if isinstance(payload, TaskWithdrawn):
        return payload.task_id, payload.withdrawn_at.timestamp(), Event.WITHDRAW
    if isinstance(payload, TaskFinished):
        return payload.task_id, payload.finished_at.timestamp(), Event.FINISH
    return None


def rebuild(
    records: Sequence[LogRecord], pools: Iterable[str] | None = None, source: str = "live log"
) -> Rebuilt:
    """`pools`: only these GPU models (pools); None: every pool in the log."""
    wanted = None if pools is None else frozenset(pools)
    left: dict[str, int] = {}

    def leave(why: str) -> None:
        left[why] = left.get(why, 0) + 1

    nodes: dict[str, TraceNode] = {}
    submitted: dict[str, tuple[float, TaskSubmitted]] = {}
    cancelled: dict[str, float] = {}
    rejected: set[str] = set()
    events: dict[str, list[tuple[float, Event]]] = {}
    last_s = -math.inf
    for record in records:
        p = record.payload
        if isinstance(p, NodeTelemetry):
            if p.node not in nodes and (wanted is None or p.gpu_model in wanted):
                nodes[p.node] = TraceNode(p.node, p.gpu_model, len(p.gpus), NODE_CPUS)
            continue
        if isinstance(p, TaskSubmitted):
            if wanted is not None and p.gpu_model not in wanted:
                continue
            if p.task_id in submitted:
                leave("resubmissions of a task id (the first is replayed)")
                continue
            submitted[p.task_id] = (record.occurred_s, p)
            last_s = max(last_s, record.occurred_s)
        elif isinstance(p, TaskCancelled) and p.task_id in submitted:
            cancelled.setdefault(p.task_id, record.occurred_s)
            last_s = max(last_s, record.occurred_s)
        elif isinstance(p, TaskRejected) and p.task_id in submitted:
            rejected.add(p.task_id)
        else:
            found = _lifecycle_event(p)
            if found is not None and found[0] in submitted:
                events.setdefault(found[0], []).append((found[1], found[2]))
                last_s = max(last_s, found[1])
    origin = math.floor(min((s for s, _ in submitted.values()), default=0.0) / 3600.0) * 3600.0
    jobs: list[TraceJob] = []
    tasks: dict[str, TaskInfo] = {}
    happened: dict[str, list[tuple[float, Event]]] = {}
    for tid, (at, spec) in submitted.items():
        if tid in rejected:
            leave("rejected at submission")
            continue
        life = [(t - origin, e) for t, e in events.get(tid, [])]
        duration = spec.expected_duration_s or _measured_duration(life)
        if duration is None:
            leave("no expected_duration_s and no uninterrupted finished run to measure")
            continue
        cancel = cancelled.get(tid)
        jobs.append(
            TraceJob(
                name=tid, organization=spec.tenant, gpu_model=spec.gpu_model, cpu_request=0.0,
                gpus_per_worker=spec.gpus_per_worker, workers=spec.workers, submit_s=at - origin,
                duration_s=float(duration), job_class="HP" if spec.task_class is TaskClass.HP else "SPOT",
                guarantee_hours=int(spec.guarantee_hours),
                checkpoint_interval_s=spec.checkpoint_interval_s or DEFAULT_CHECKPOINT_S,
                cancel_s=None if cancel is None else max(cancel, at) - origin,
            )
        )  # fmt: skip
        tasks[tid] = TaskInfo(
            spec.gpu_model, spec.task_class is TaskClass.HP, spec.gpus_per_worker * spec.workers, at - origin
        )
        happened[tid] = life
    jobs.sort(key=lambda j: (j.submit_s, j.name))
    horizon = max((j.submit_s + j.duration_s for j in jobs), default=0.0)
    end = max(last_s - origin, 0.0) if jobs else 0.0
    trace = Trace(tuple(nodes.values()), tuple(jobs), horizon, source)
    return Rebuilt(trace, origin, end, tasks, happened, left)


def _measured_duration(life: list[tuple[float, Event]]) -> float | None:
    """A run that went from a start straight to the finish, the only run the task had."""
    kinds = [e for _, e in life]
    if kinds == [Event.START, Event.FINISH]:
        return life[1][0] - life[0][0]
    return None
