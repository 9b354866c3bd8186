"""GFS ablations (spec 6.5): each removes one ingredient, everything else as in `gfs`.

- gfs-no-forecast: reactive quota (spot may use whatever is idle), no forecast, no eta;
- gfs-no-feedback: forecast quota with eta fixed at 1 (no eviction feedback);
- gfs-fifo-victims: GFS quota and placement, but the production-like first-node victims.
"""

from __future__ import annotations

import dataclasses

from services.core.policies.gfs import build_gfs
from services.core.policies.protocols import SchedulingPolicy
from services.core.quota import ForecastQuota, QuotaSettings, ReactiveQuota
from services.core.victims import FirstNodeVictims


def build_gfs_no_forecast(settings: QuotaSettings | None = None) -> SchedulingPolicy:
    return dataclasses.replace(
        build_gfs(settings), name="gfs-no-forecast", quota=ReactiveQuota(settings=settings or QuotaSettings())
    )


def build_gfs_no_feedback(settings: QuotaSettings | None = None) -> SchedulingPolicy:
    quota = ForecastQuota(settings=settings or QuotaSettings(), feedback=False)
    return dataclasses.replace(build_gfs(settings), name="gfs-no-feedback", quota=quota)


def build_gfs_fifo_victims(settings: QuotaSettings | None = None) -> SchedulingPolicy:
    return dataclasses.replace(build_gfs(settings), name="gfs-fifo-victims", victims=FirstNodeVictims())
