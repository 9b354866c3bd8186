"""The forecast stream's pure steps: task events -> HP demand deltas -> per-minute samples ->
completed hourly peaks per (pool, tenant) and per pool. No Faust, no Kafka, no clock.

Two series, as the simulator forecasts them (`FORECAST_DEMAND_SOURCE`):
- "servable" (the default, issue 35, `services/core/servable.py`): the levels the preemption
  service publishes on gfs.pools.demand after each pass that changed them (`PoolDemand.set_levels`);
- "observed" (issue 10, `services/core/observed_demand.py`): running plus queued HP GPUs (g x w),
  counted from the task's acceptance until it finishes, is rejected or cancelled, or is evicted
  without requeue (`apply_task_event` -> `PoolDemand.apply`).
Either way a sample at each minute boundary after that instant's changes; each hour keeps the peak
of its samples, per tenant and of the pool's total. Tests feed the same events to both and check
the series agree.

State is plain data (`to_json` / `from_json`) because it lives in Faust tables whose changelog is
the durable copy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from gfs.schemas.tasks import (
    EvictionReason,
    RejectionReason,
    TaskAccepted,
    TaskCancelled,
    TaskClass,
    TaskEvicted,
    TaskFinished,
    TaskRejected,
    TaskSubmitted,
)

MINUTE_S = 60.0
HOUR_MINUTES = 60
_DECIMALS = 6  # as ObservedDemand: sums of fractional requests drift by ~1e-12


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """What the stream remembers of a task (keyed by task id, co-partitioned with its events).

    The submission (size, tenant) and the lifecycle events come on two topics that are consumed
    independently, so either may be seen first: the task counts once both its size and its
    acceptance are known, unless it already ended.
    """

    tenant: str | None = None
    gpus: float | None = None  # g x w, from TaskSubmitted
    hp: bool | None = None
    pool: str | None = None  # from TaskAccepted
    accepted_s: float | None = None
    counted: bool = False  # its GPUs are in the demand now
    ended: bool = False
    # When it ended (the ending event's time): the stream deletes the record a while after it
    # (task_expiry.py). None: not ended, or ended before this field existed.
    ended_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "gpus": self.gpus, "hp": self.hp, "pool": self.pool,
                "accepted_s": self.accepted_s, "counted": self.counted, "ended": self.ended,
                "ended_s": self.ended_s}  # fmt: skip

    @staticmethod
    def from_json(data: dict[str, Any]) -> TaskRecord:
        return TaskRecord(**data)


@dataclass(frozen=True, slots=True)
class Delta:
    """A change of one (pool, tenant)'s HP demand at `at_s`."""

    pool: str
    tenant: str
    gpus: float
    at_s: float


def apply_task_event(
    record: TaskRecord | None, payload: object, at_s: float
) -> tuple[TaskRecord | None, Delta | None]:
    """The task's new record and the demand change the event implies (None: no change).

    Counted from acceptance (or from the submission, when that is seen after the acceptance) until
    it finishes, is rejected or cancelled, or is evicted without requeue. Redelivered events change
    nothing.
    """
    current = record or TaskRecord()
    if isinstance(payload, TaskSubmitted):
        if current.gpus is not None:
            return record, None  # a redelivered or duplicate submission
        sized = replace(
            current,
            tenant=payload.tenant,
            gpus=payload.gpus_per_worker * payload.workers,
            hp=payload.task_class is TaskClass.HP,
        )
        return _count_if_ready(sized)
    if isinstance(payload, TaskAccepted):
        if current.accepted_s is not None or current.ended:
            return record, None
        accepted = replace(current, pool=payload.pool, accepted_s=at_s, hp=payload.task_class is TaskClass.HP)
        return _count_if_ready(accepted)
    # A duplicate submission's rejection carries the original's task id: the copy ended, not the
    # task this record counts (it runs on until its own end).
    duplicate = isinstance(payload, TaskRejected) and payload.reason is RejectionReason.DUPLICATE_TASK_ID
    ends = (isinstance(payload, TaskFinished | TaskRejected | TaskCancelled) and not duplicate) or (
        isinstance(payload, TaskEvicted) and payload.reason is EvictionReason.CANCELLED
    )
    if not ends or current.ended:
        return record, None  # started, evicted and requeued, a period closed: still running or queued
    ended = replace(current, ended=True, counted=False, ended_s=at_s)
    if (
        current.counted
        and current.pool is not None
        and current.tenant is not None
        and current.gpus is not None
    ):
        return ended, Delta(current.pool, current.tenant, -current.gpus, at_s)
    return ended, None


class FutureEventError(ValueError):
    """A task event stamped too far ahead of the stream's clock (dead-lettered with this reason)."""

    reason_code = "future_event"


def check_not_ahead(occurred_s: float, clock_s: float, max_ahead_s: float) -> None:
    """Refuse an event whose `occurred_at` is more than `max_ahead_s` after the stream's clock.

    Issue 22: minutes are sampled up to each event's time, so one cancel stamped in the year 2100
    moved a pool's sampling there: no hour closed again (and closing the hours in between cost
    one loop step each). The rule: such an event is dead-lettered with this reason, the pool's
    state is left as it was. A producer's clock may run a little ahead; `max_ahead_s` is that
    allowance (default 300 s, `FORECAST_MAX_AHEAD_S`).
    """
    ahead = occurred_s - clock_s
    if ahead > max_ahead_s:
        raise FutureEventError(
            f"occurred_at is {ahead:.0f} s ahead of the stream's clock; at most {max_ahead_s:g} s is "
            "accepted (a producer's clock that far ahead would stop the pool's forecasts)"
        )


def _count_if_ready(record: TaskRecord) -> tuple[TaskRecord, Delta | None]:
    """Start counting an HP task once its size, tenant and acceptance are all known."""
    if record.counted or record.ended or not record.hp:
        return record, None
    if record.gpus is None or record.tenant is None or record.pool is None or record.accepted_s is None:
        return record, None
    return replace(record, counted=True), Delta(record.pool, record.tenant, record.gpus, record.accepted_s)


@dataclass(frozen=True, slots=True)
class CompletedHour:
    """One hour's peaks: per tenant and of the pool's per-minute total."""

    hour: int  # hours since the stream's time origin
    tenants: dict[str, float]
    pool: float


@dataclass(slots=True)
class PoolDemand:
    """One pool's running + queued HP levels and the peaks of the hour being sampled."""

    levels: dict[str, float] = field(default_factory=dict)
    next_minute: int | None = None  # the first minute boundary not sampled yet (None: no event yet)
    peaks: dict[str, float] = field(default_factory=dict)  # of the open hour
    pool_peak: float = 0.0

    def advance(self, t_s: float) -> list[CompletedHour]:
        """Sample every minute boundary before `t_s` with the levels that held over it; return the
        hours that closed. A boundary at exactly `t_s` waits for every event at `t_s`."""
        last = math.ceil(t_s / MINUTE_S) - 1
        if self.next_minute is None:
            self.next_minute = last + 1  # a fresh stream starts sampling at its first event
            return []
        closed: list[CompletedHour] = []
        levels = {t: _clean(v) for t, v in self.levels.items()}
        total = _clean(sum(self.levels.values()))
        while self.next_minute <= last:
            hour = self.next_minute // HOUR_MINUTES
            end_of_hour = (hour + 1) * HOUR_MINUTES - 1
            upto = min(last, end_of_hour)
            for tenant, level in levels.items():
                if level > self.peaks.get(tenant, 0.0):
                    self.peaks[tenant] = level
            self.pool_peak = max(self.pool_peak, total)
            if upto == end_of_hour:  # the hour's last minute is sampled: it is complete
                closed.append(CompletedHour(hour, dict(self.peaks), self.pool_peak))
                self.peaks = {t: 0.0 for t in self.peaks}
                self.pool_peak = 0.0
            self.next_minute = upto + 1
        return closed

    def set_levels(self, levels: dict[str, float], at_s: float) -> list[CompletedHour]:
        """Close the minutes before `at_s`, then put the pool's servable levels in force (issue 35:
        the preemption service publishes them; tenants left out are at 0)."""
        closed = self.advance(at_s)
        self.levels = {t: 0.0 for t in self.levels}
        self.levels.update({t: float(v) for t, v in levels.items()})
        return closed

    def apply(self, delta: Delta) -> list[CompletedHour]:
        """Close the minutes before the change, then apply it."""
        closed = self.advance(delta.at_s)
        self.levels[delta.tenant] = self.levels.get(delta.tenant, 0.0) + delta.gpus
        if abs(self.levels[delta.tenant]) < 10.0**-_DECIMALS:
            self.levels[delta.tenant] = 0.0
        return closed

    def to_json(self) -> dict[str, Any]:
        return {"levels": self.levels, "next_minute": self.next_minute, "peaks": self.peaks,
                "pool_peak": self.pool_peak}  # fmt: skip

    @staticmethod
    def from_json(data: dict[str, Any]) -> PoolDemand:
        return PoolDemand(
            levels=dict(data["levels"]),
            next_minute=data["next_minute"],
            peaks=dict(data["peaks"]),
            pool_peak=float(data["pool_peak"]),
        )


def _clean(value: float) -> float:
    return round(value, _DECIMALS) + 0.0
