"""The survival quote on a spot task's TaskAccepted (issue 27 item 1): wire <-> core.

The quota service sends the pool's HP-demand forecast with every SpotQuota (`hp_demand`); the
controller quotes from the last one it received and the pool's state at acceptance
(services/core/survival.py). No forecast, or one whose hours are all over: no quote, rather than a
number that means nothing.
"""

from __future__ import annotations

from gfs.schemas.quota import SpotQuota
from gfs.schemas.tasks import SurvivalQuote
from gfs.services.core.runtime import PoolRuntime
from gfs.services.core.survival import DEFAULT_RECALIBRATION, HpOutlook, quote_in_pool
from gfs.services.core.task import TaskClass, TaskSpec

HOUR_S = 3600.0


def survival_on_accept(
    runtime: PoolRuntime, spec: TaskSpec, quota: SpotQuota | None, now: float
) -> SurvivalQuote | None:
    if spec.task_class is not TaskClass.SPOT or quota is None or not quota.hp_demand:
        return None
    # Hours of the forecast already over since the quota was computed are dropped.
    skip = max(0, int((now - quota.valid_from.timestamp()) // HOUR_S))
    hours = quota.hp_demand[skip:]
    if not hours:
        return None
    outlook = HpOutlook(tuple(h.mean for h in hours), tuple(h.std for h in hours))
    q = quote_in_pool(runtime, spec.total_gpus, spec.guarantee_hours, outlook, DEFAULT_RECALIBRATION)
    return SurvivalQuote(
        guarantee_hours=spec.guarantee_hours,  # type: ignore[arg-type]  # validated on submission
        guarantee=q.guarantee,
        hours_1=q.by_hours[1],
        hours_2=q.by_hours[2],
        hours_4=q.by_hours[4],
    )
