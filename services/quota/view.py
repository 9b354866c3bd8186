"""What the quota service's read side (the SRE API, quota_api.py, and the metrics, metrics.py)
reads of the running service: declared here so they depend on this, not on the service that
starts them (no circle of files)."""

from __future__ import annotations

from typing import Protocol

from gfs.services.platform.clock import Clock
from gfs.services.platform.kafka.lag import LagProbe
from gfs.services.platform.kafka.processing import ConsumeStats
from gfs.services.quota.book import PoolBook, QuotaComputation


class QuotaView(Protocol):
    """`QuotaService`'s state, read only."""

    books: dict[str, PoolBook]
    latest: dict[str, QuotaComputation]
    clock: Clock
    stats: ConsumeStats
    lag_probe: LagProbe | None
    fallback_forecasts: int
