"""The SpotQuota carries the forecast behind it (issue 27 item 1: the preemption service quotes
spot tasks' survival from it), from the hour holding the quota's computation on."""

from __future__ import annotations

from gfs.schemas.quota import HpDemandHour
from gfs.services.quota.book import ForecastView, PoolBook, StatusView
from gfs.services.quota.mapping import spot_quota

T0 = 1_700_000_000.0
H = 3600.0


def _book(origin: float | None) -> PoolBook:
    book = PoolBook("A100")
    book.update_status(
        StatusView(
            observed_s=T0, capacity=100, idle_gpus=30, spot_in_use=10.0, hp_running=50.0, hp_queued=5.0,
            head_wait_s=None, quota_held_wait_s=None,
        )
    )  # fmt: skip
    if origin is not None:
        book.update_forecast(
            ForecastView(
                origin_s=origin,
                mean=(40.0, 50.0, 60.0, 70.0),
                std=(4.0, 5.0, 6.0, 7.0),
                quantiles=({}, {}, {}, {}),
                version="m-1",
                fallback=False,
            )
        )
    return book


def test_the_quota_carries_the_forecast_hours_not_yet_over() -> None:
    fresh = _book(T0).compute(T0 + 60, refresh_s=300)
    assert fresh is not None
    assert spot_quota(fresh).hp_demand == tuple(
        HpDemandHour(mean=m, std=s) for m, s in ((40, 4), (50, 5), (60, 6), (70, 7))
    )
    # Origin 1.5 h before the computation: its first hour is over and is left out, as the quota
    # leaves it out.
    older = _book(T0 - 1.5 * H).compute(T0, refresh_s=300)
    assert older is not None
    assert spot_quota(older).hp_demand == tuple(
        HpDemandHour(mean=m, std=s) for m, s in ((50, 5), (60, 6), (70, 7))
    )


def test_a_quota_without_a_usable_forecast_carries_none() -> None:
    out = _book(None).compute(T0, refresh_s=300)
    assert out is not None and out.forecast is None
    assert spot_quota(out).hp_demand is None
