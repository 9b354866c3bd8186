"""The guarantee periods a spot run closed, as GuaranteePeriodClosed events.

A task's record counts the periods of its current run already reported (`_Task.periods_closed`);
these functions report the next ones and advance that count, so each period is reported once: by
the timer when it ran out (the pool's `tick`), or by the stop or finish that ended the run early.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel

from gfs.schemas.tasks import GuaranteeOutcome, GuaranteePeriodClosed
from gfs.services.core.guarantee import GUARANTEE_PERIOD_S
from gfs.services.preemption.controller.types import _Task, utc

_EPS_S = 1e-6  # a stop this close to a period's start cut nothing short (float sums of periods)


def closes(
    pool: str, tid: str, task: _Task, start: float, now: float, successes: int, *, failed: bool
) -> list[BaseModel]:
    """GuaranteePeriodClosed for the periods a stop or finish logged now: `successes` that ran out
    (counted), then, `failed`, the period the stop cut short (not counted: the run is over)."""
    events: list[BaseModel] = []
    for _ in range(successes):
        period_start = start + task.periods_closed * GUARANTEE_PERIOD_S
        end = min(now, period_start + GUARANTEE_PERIOD_S)
        task.periods_closed += 1
        events.append(close(pool, tid, task, period_start, end, GuaranteeOutcome.SUCCEEDED))
    if failed:
        period_start = start + task.periods_closed * GUARANTEE_PERIOD_S
        events.append(close(pool, tid, task, min(period_start, now), now, GuaranteeOutcome.FAILED))
    return events


def cut_short(pool: str, tid: str, task: _Task, start: float, now: float) -> GuaranteePeriodClosed | None:
    """The period of the run started at `start` that a stop at `now` cut short, as the SUCCEEDED
    close a finish would report (the periods before it already closed: call after `closes`); None
    when the stop fell on a period's boundary. Not counted: the run is over."""
    period_start = start + task.periods_closed * GUARANTEE_PERIOD_S
    if now - period_start <= _EPS_S:
        return None
    return close(pool, tid, task, period_start, now, GuaranteeOutcome.SUCCEEDED)


def finished_at(closed: GuaranteePeriodClosed, end: datetime) -> GuaranteePeriodClosed:
    """`closed` ending when the run finished instead (inside the period, never before its start)."""
    limit = closed.period_start + timedelta(seconds=GUARANTEE_PERIOD_S)
    return closed.model_copy(update={"period_end": max(closed.period_start, min(end, limit))})


def ran_out(pool: str, tid: str, task: _Task, run_start: float, end: float) -> GuaranteePeriodClosed:
    """The next period of the run started at `run_start` ran out at `end` (the timer's; counted)."""
    period_start = run_start + task.periods_closed * GUARANTEE_PERIOD_S
    task.periods_closed += 1
    return close(pool, tid, task, period_start, end, GuaranteeOutcome.SUCCEEDED)


def close(
    pool: str, tid: str, task: _Task, start: float, end: float, outcome: GuaranteeOutcome
) -> GuaranteePeriodClosed:
    return GuaranteePeriodClosed(
        task_id=tid, pool=pool, guarantee_hours=task.submitted.guarantee_hours,
        period_start=utc(start), period_end=utc(end), outcome=outcome,
    )  # fmt: skip
