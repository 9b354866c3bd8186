"""A flat pool forecast, as the forecast stream publishes hourly: a tool's run is minutes long, so
no forecast hour closes in it, and without a forecast the quota admits no spot work."""

from __future__ import annotations

from datetime import datetime

from gfs.schemas.forecast import HourlyDemand, PoolDemandForecast


def flat_forecast(
    pool: str, hp: float, *, std: float, p90: float, model_name: str, now: datetime, fallback: bool = False
) -> PoolDemandForecast:
    """The same HP demand `hp` (mean and median; `std`, 90th percentile `p90`) for each of the next
    four hours, from the hour `now` is in; `fallback` flags it as the stream's persistence fallback
    would."""
    horizon = tuple(
        HourlyDemand(hour_ahead=h, mean=hp, std=std, quantiles={"0.5": hp, "0.9": p90}) for h in range(1, 5)
    )
    return PoolDemandForecast(
        pool=pool,
        origin_time=now.replace(minute=0, second=0, microsecond=0),
        tenants=1,
        model_name=model_name,
        model_version=str(int(now.timestamp())),
        horizon=horizon,
        fallback=fallback,
    )
