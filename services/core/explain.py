"""Answers to "why was my task evicted, why is it still queued": built on demand from what the
runtime kept of its decisions (the plans and the last pass's queue memos), never an input to one."""

from __future__ import annotations

from dataclasses import dataclass

from gfs.services.core.ids import TaskId
from gfs.services.core.reasons import EvictionReason, Unschedulable


@dataclass(frozen=True, slots=True)
class CandidateNode:
    """One node the victim selector compared: the spot tasks it would evict there and its cost.
    `eviction_rate_term` + `lost_gpu_term` = `cost` for GFS; None for selectors with another cost."""

    node: str
    victims: tuple[TaskId, ...]
    cost: float
    eviction_rate_term: float | None
    lost_gpu_term: float | None
    gpu_slot: int = -1  # shared GPU (fractional preemption), -1 for whole GPUs


@dataclass(frozen=True, slots=True)
class PreemptionRecord:
    """One worker of an HP task placed by preemption: the winner and the best losing candidates."""

    at_s: float
    preemptor: TaskId
    winner: CandidateNode
    losers: tuple[CandidateNode, ...]  # cheapest first, at most preemption_plan.MAX_ALTERNATIVES
    considered: int  # candidates compared in all, the winner included


@dataclass(frozen=True, slots=True)
class EvictionRecord:
    at_s: float
    task_id: TaskId
    node: str
    reason: EvictionReason
    preemptor: TaskId | None
    preemption: PreemptionRecord | None  # the plan that chose this victim (preemptions only)


@dataclass(frozen=True, slots=True)
class QueueStatus:
    reason: Unschedulable
    blocked_by: TaskId | None  # the blocked head ahead of it (HEAD_OF_LINE only)
    since_pass: int  # the pool's pass number the reason comes from (0: none yet)


@dataclass(frozen=True, slots=True)
class Explanation:
    task_id: TaskId
    state: str  # "queued", "running" or "unknown"
    queued: QueueStatus | None
    preemptions: tuple[PreemptionRecord, ...]  # as the preemptor, at its latest start
    last_eviction: EvictionRecord | None

    def message(self) -> str:
        parts = [f"task {self.task_id} is {self.state}"]
        if self.queued is not None:
            q = self.queued
            extra = f" (behind {q.blocked_by})" if q.blocked_by else ""
            parts.append(f"queued: {q.reason.message}{extra}")
        if self.last_eviction is not None:
            e = self.last_eviction
            by = f" by {e.preemptor}" if e.preemptor else ""
            parts.append(f"last evicted at {e.at_s:g}s on {e.node}{by}: {e.reason.message}")
        for p in self.preemptions:
            parts.append(
                f"preempted on {p.winner.node} (cost {p.winner.cost:.6g}, victims "
                f"{', '.join(p.winner.victims) or 'none'}) over {p.considered - 1} other candidate(s)"
            )
        return "; ".join(parts)
