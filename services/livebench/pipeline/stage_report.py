"""The bench's per-stage latency budget (issue 37): each on-arrival bind's submit -> BindCommand
latency split into the stages its stamps name (services/platform/stage_stamps.py), printed as a
table, with a check that the stages of each record add up to the latency the bench measured on
its own clock (within 5%): a stage left out, counted twice or stamped at the wrong step shows there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gfs.services.livebench.pipeline.load import BenchState, percentile
from gfs.services.platform.stage_stamps import COMMIT_UNKNOWN, STAGES

TOLERANCE = 0.05  # the stages of a record add up to its measured latency within this share


@dataclass(frozen=True, slots=True)
class StageBudget:
    tasks: int  # on-arrival binds looked at
    staged: int  # of those, with every stamp
    within: int  # of those, whose stages add up to the measured latency within TOLERANCE
    worst: float  # the largest |sum - measured| / measured among the staged
    ordered: int  # of the staged, those whose stamps are in the order of the steps (no stage < 0)


def adds_up(stages: dict[str, float], measured_s: float, tolerance: float = TOLERANCE) -> float:
    """|sum of the stages - measured| / measured (0 when both are 0)."""
    total = sum(stages.values())
    return abs(total - measured_s) / measured_s if measured_s > 0 else abs(total)


def stage_budget(state: BenchState, tasks: Iterable[str], *, show: bool = True) -> StageBudget:
    """Print the stage table of `tasks` (the on-arrival binds without preemption) and check the
    sums; the counts."""
    tasks = list(tasks)
    staged = [(state.stages[t], state.latency[t]) for t in tasks if t in state.stages and t in state.latency]
    errors = [adds_up(stages, measured) for stages, measured in staged]
    budget = StageBudget(
        len(tasks),
        len(staged),
        sum(1 for e in errors if e <= TOLERANCE),
        max(errors, default=0.0),
        sum(1 for stages, _ in staged if min(stages.values()) >= 0.0),
    )
    if not show:
        return budget
    print(f"\nlatency by stage (on-arrival binds without preemption: {budget.staged} of {budget.tasks} "
          f"carry every stamp), ms:")  # fmt: skip
    if not staged:
        return budget
    names = [name for name, _ in STAGES]
    if any(COMMIT_UNKNOWN in stages for stages, _ in staged):
        names.insert(names.index("commit"), COMMIT_UNKNOWN)
    total_mean = sum(measured for _, measured in staged) / len(staged)
    print(f"{'stage':<18} {'p50':>8} {'p99':>8} {'mean':>8} {'share':>6}  what")
    what = dict(STAGES)
    for name in names:
        values = [stages[name] * 1000 for stages, _ in staged if name in stages]
        if not values:
            continue
        mean = sum(values) / len(values)
        about = what.get(
            name,
            "commit and relay together: the relay read the row before the commit's "
            "return reached the decider, or another instance relayed it",
        )
        print(f"{name:<18} {percentile(values, 0.5):8.1f} {percentile(values, 0.99):8.1f} {mean:8.1f} "
              f"{mean / (total_mean * 1000):6.1%}  {about}")  # fmt: skip
    measured = [m * 1000 for _, m in staged]
    print(f"{'end to end':<18} {percentile(measured, 0.5):8.1f} {percentile(measured, 0.99):8.1f} "
          f"{total_mean * 1000:8.1f}")  # fmt: skip
    print(f"stages add up to the measured latency within {TOLERANCE:.0%}: {budget.within} of "
          f"{budget.staged} (worst {budget.worst:.2%}); stamps in step order: {budget.ordered} of "
          f"{budget.staged}")  # fmt: skip
    return budget
