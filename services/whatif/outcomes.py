"""What happened to a set of tasks, from their ordered life events: the numbers `gfs whatif` compares.

One reducer for both sides, so that "what happened" (the live lifecycle events) and a simulated
run (the simulator's decision log plus its finish times) are measured by the same definitions:

- evictions: runs of spot tasks ended by an eviction (a cancellation is not one);
- queueing: per task, the time from submission to its first start plus every wait after an
  eviction until it runs again, and a queued task's wait until it is withdrawn or the log ends
  (spec 6.3's "total waiting time"); the mean over the class's tasks;
- spot GPU-hours: the GPUs spot tasks held times how long they held them (allocation, what an
  operator bills; work lost to evictions included), per pool.
Runs still going, and waits still open, at the end of the log are cut there (censored).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


class Event(enum.Enum):
    START = "start"
    EVICT = "evict"  # stopped and requeued by the scheduler (counts as an eviction)
    REQUEUE = "requeue"  # stopped and requeued without an eviction (a lease not renewed)
    STOP = "stop"  # a running task stopped for good (cancelled by its owner)
    WITHDRAW = "withdraw"  # a queued task left the queue (cancelled by its owner)
    FINISH = "finish"


@dataclass(frozen=True, slots=True)
class TaskInfo:
    pool: str
    hp: bool
    gpus: float  # GPUs the whole task holds while it runs
    submit_s: float


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    wait_s: float
    evictions: int
    run_s: float


def task_outcome(submit_s: float, events: Iterable[tuple[float, Event]], end_s: float) -> TaskOutcome:
    """One task's events in time order (ties in the order given) reduced to its outcome; a run or a
    wait still open at `end_s` is cut there. Events that do not fit the state (a second eviction
    record for the same run, one per node of a gang) are ignored."""
    queued_since: float | None = submit_s
    running_since: float | None = None
    wait = run = 0.0
    evictions = 0
    for t, event in events:
        if event is Event.START and queued_since is not None:
            wait += t - queued_since
            queued_since, running_since = None, t
        elif event in (Event.EVICT, Event.REQUEUE, Event.STOP, Event.FINISH) and running_since is not None:
            run += t - running_since
            running_since = None
            evictions += event is Event.EVICT
            queued_since = t if event in (Event.EVICT, Event.REQUEUE) else None
        elif event is Event.WITHDRAW and queued_since is not None:
            wait += t - queued_since
            queued_since = None
    if queued_since is not None:
        wait += max(0.0, end_s - queued_since)
    if running_since is not None:
        run += max(0.0, end_s - running_since)
    return TaskOutcome(wait, evictions, run)


@dataclass(frozen=True, slots=True)
class Summary:
    """The compared numbers of one run (what happened, or one simulated policy)."""

    evictions: int
    spot_queue_mean_s: float
    hp_queue_mean_s: float
    spot_gpu_hours: float
    spot_gpu_hours_by_pool: Mapping[str, float] = field(default_factory=dict)
    spot_tasks: int = 0
    hp_tasks: int = 0

    def headline(self) -> dict[str, float]:
        return {
            "evictions": float(self.evictions),
            "spot_queue_mean_s": self.spot_queue_mean_s,
            "hp_queue_mean_s": self.hp_queue_mean_s,
            "spot_gpu_hours": self.spot_gpu_hours,
        }

    def to_json(self) -> dict[str, object]:
        return {
            **self.headline(),
            "spot_gpu_hours_by_pool": dict(sorted(self.spot_gpu_hours_by_pool.items())),
            "spot_tasks": self.spot_tasks,
            "hp_tasks": self.hp_tasks,
        }


def summarize(
    tasks: Mapping[str, TaskInfo], events: Mapping[str, list[tuple[float, Event]]], end_s: float
) -> Summary:
    """Every task of `tasks` (its events from `events`, none: queued until the end)."""
    spot_waits: list[float] = []
    hp_waits: list[float] = []
    evictions = 0
    by_pool: dict[str, float] = {}
    for tid, info in tasks.items():
        out = task_outcome(info.submit_s, sorted(events.get(tid, ()), key=lambda e: e[0]), end_s)
        if info.hp:
            hp_waits.append(out.wait_s)
            continue
        spot_waits.append(out.wait_s)
        evictions += out.evictions
        by_pool[info.pool] = by_pool.get(info.pool, 0.0) + info.gpus * out.run_s / 3600.0
    return Summary(
        evictions=evictions,
        spot_queue_mean_s=sum(spot_waits) / len(spot_waits) if spot_waits else 0.0,
        hp_queue_mean_s=sum(hp_waits) / len(hp_waits) if hp_waits else 0.0,
        spot_gpu_hours=sum(by_pool.values()),
        spot_gpu_hours_by_pool=by_pool,
        spot_tasks=len(spot_waits),
        hp_tasks=len(hp_waits),
    )
