"""Wire payloads <-> the quota book's views (the only module of the service that knows both)."""

from __future__ import annotations

from gfs.schemas.forecast import PoolDemandForecast
from gfs.schemas.pool_status import PoolStatus
from gfs.schemas.quota import GuaranteeQuota, HpDemandHour, SpotQuota
from gfs.services.quota.book import ForecastView, QuotaComputation, StatusView
from gfs.services.quota.store import utc


def status_view(status: PoolStatus) -> StatusView:
    return StatusView(
        observed_s=status.observed_at.timestamp(),
        capacity=status.capacity_gpus,
        idle_gpus=status.idle_gpus,
        spot_in_use=status.spot_in_use_gpus,
        hp_running=status.hp_running_gpus,
        hp_queued=status.hp_queued_gpus,
        head_wait_s=status.spot_head_wait_s,
        quota_held_wait_s=status.quota_held_wait_s,
        hp_placeable=status.hp_placeable_gpus,
        spot_smallest_gpus=status.spot_smallest_gpus,
        reserved_task_id=status.reserved_task_id,
        spot_head_held_by=status.spot_head_held_by,
    )


def forecast_view(forecast: PoolDemandForecast) -> ForecastView:
    return ForecastView(
        origin_s=forecast.origin_time.timestamp(),
        mean=tuple(h.mean for h in forecast.horizon),
        std=tuple(h.std for h in forecast.horizon),
        quantiles=tuple(dict(h.quantiles) for h in forecast.horizon),
        version=f"{forecast.model_name}:{forecast.model_version}",
        fallback=forecast.fallback,
    )


def spot_quota(computed: QuotaComputation) -> SpotQuota:
    return SpotQuota(
        pool=computed.pool,
        quotas=tuple(
            GuaranteeQuota(guarantee_hours=hours, quota_gpus=max(0.0, quota))  # type: ignore[arg-type]
            for hours, quota in sorted(computed.quota.items())
        ),
        eta=computed.eta,
        capacity_gpus=computed.capacity,
        valid_from=utc(computed.computed_s),
        valid_until=utc(computed.valid_until_s),
        forecast_version=computed.forecast_version,
        hp_demand=hp_demand(computed),
    )


def hp_demand(computed: QuotaComputation) -> tuple[HpDemandHour, ...] | None:
    """The forecast behind the quota from the hour holding its computation on (hours already over
    are dropped, as the quota drops them), for the survival quote of accepted spot tasks."""
    fc = computed.forecast
    if fc is None:
        return None
    skip = max(0, int((computed.computed_s - fc.origin_s) // 3600.0))
    return tuple(HpDemandHour(mean=m, std=s) for m, s in zip(fc.mean[skip:], fc.std[skip:], strict=True))
