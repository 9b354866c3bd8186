"""Reconciliation (issue 22 item 7): what the agents say they run against what the service wants.

Commands can be lost for good: an agent refuses a command older than its freshness window
(AGENT_COMMAND_MAX_AGE_S) and tells nobody, and a node cut off longer than that comes back still
running workers whose task was declared lost and re-run elsewhere. Every agent therefore reports
the workers it runs (`NodeTelemetry.running`, with each worker's attempt), and the controller
compares that report with its own view, as the kubelet does with its pods and Slurm with "kill
unknown job":

- a bind lost: none of its workers started `bind_start_timeout_s` after it was issued, and the
  node's report, sampled after the bind was issued, lists none of them. The bind is issued again
  (a new command id and a fresh `issued_at`: command ids never repeat);
- an eviction lost: its grace period plus margin passed without an ack and the node's report still
  lists the attempt. It is issued again (a new id, a fresh `issued_at`), and whatever waits for it
  (the preemptor's held binds, the task's next attempt) keeps waiting for a real end: an ack, or a
  report that no longer lists the attempt;
- unknown work: a worker of an attempt the service does not hold running on that node (the run
  ended, was declared lost, or runs elsewhere), listed in the node's reports for at least
  `unknown_after_s`. The node is told to stop that attempt (an EvictCommand naming it, no grace).

Nodes whose agent does not report (`running` null: an older agent) are not reconciled: the earlier
rules (held binds go out at grace + margin) apply to them unchanged.

Pure: the controller owns the state and calls these helpers; the shell decides when reconciling
may act (never while its input lags, never under the kill switch for evictions).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

Worker = tuple[str, int, int]  # (task id, attempt, worker index)


@dataclass(frozen=True, slots=True)
class NodeReport:
    """What one agent runs at `sampled_at` (its clock): workers by task, attempt and index.
    Workers of commands without an attempt are left out (their run cannot be told apart)."""

    sampled_at: float
    running: frozenset[Worker]

    def lists(self, task_id: str, attempt: int) -> bool:
        return any(t == task_id and a == attempt for t, a, _ in self.running)

    def lists_worker(self, task_id: str, attempt: int, worker: int) -> bool:
        return (task_id, attempt, worker) in self.running

    def attempts(self) -> set[tuple[str, int]]:
        return {(t, a) for t, a, _ in self.running}

    def as_data(self) -> dict[str, object]:
        return {"sampled_at": self.sampled_at, "running": sorted([list(w) for w in self.running])}

    @classmethod
    def from_data(cls, data: dict[str, object]) -> NodeReport:
        rows = data.get("running") or []
        assert isinstance(rows, list)
        return cls(float(data["sampled_at"]), frozenset((str(t), int(a), int(w)) for t, a, w in rows))  # type: ignore[arg-type]


def report_of(sampled_at: float, running: Iterable[tuple[str, int | None, int]]) -> NodeReport:
    return NodeReport(sampled_at, frozenset((t, a, w) for t, a, w in running if a is not None))


def worth_journaling(last: NodeReport | None, new: NodeReport, every_s: float) -> bool:
    """A report is journaled (and so seen by the controller) when it says something new, or when
    the last one journaled is `every_s` old: the controller's view of a node is then never older
    than that, without a journal row per heartbeat."""
    if last is None:
        return True
    if new.sampled_at < last.sampled_at:
        return False  # an older sample read late: the newer one already says more
    return new.running != last.running or new.sampled_at - last.sampled_at >= every_s


def bind_lost(
    *, issued_at: float, now: float, timeout_s: float, report: NodeReport | None,
    task_id: str, attempt: int, workers: Iterable[int],
) -> bool:  # fmt: skip
    """Whether a bind whose workers have not started (nor exited) is to be issued again."""
    if report is None or now - issued_at < timeout_s or report.sampled_at <= issued_at:
        return False  # too early, or no report since the bind was issued: nothing known yet
    return not any(report.lists_worker(task_id, attempt, w) for w in workers)


@dataclass(slots=True)
class UnknownWork:
    """Attempts a node runs that the service does not hold there, and since when (report time)."""

    after_s: float
    since: dict[tuple[str, str, int], float] = field(default_factory=dict)  # (node, task, attempt)
    stopped: dict[tuple[str, str, int], float] = field(default_factory=dict)  # -> report time stopped

    def observe(self, node: str, report: NodeReport, known: Callable[[str, int], bool]) -> None:
        """Record `report`: attempts no longer listed (or known again) are forgotten."""
        listed = {(node, t, a) for t, a in report.attempts() if not known(t, a)}
        for key in [k for k in self.since if k[0] == node and k not in listed]:
            del self.since[key]
            self.stopped.pop(key, None)
        for key in listed:
            self.since.setdefault(key, report.sampled_at)

    def due(self, node: str, report: NodeReport) -> list[tuple[str, int]]:
        """Attempts to stop on `node` now: unknown for at least `after_s` of the node's reports, and
        not stopped within the last `after_s` (a stop whose ack was lost is sent again)."""
        out = []
        for (n, task, attempt), first in sorted(self.since.items()):
            if n != node or report.sampled_at - first < self.after_s:
                continue
            last = self.stopped.get((n, task, attempt))
            if last is not None and report.sampled_at - last < self.after_s:
                continue
            out.append((task, attempt))
        return out

    def mark_stopped(self, node: str, task: str, attempt: int, at: float) -> None:
        self.stopped[(node, task, attempt)] = at

    def forget(self, node: str) -> None:
        for key in [k for k in self.since if k[0] == node]:
            del self.since[key]
            self.stopped.pop(key, None)
