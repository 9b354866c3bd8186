"""The monthly benefit in money (services/whatif/money.py), hand-worked."""

from __future__ import annotations

import pytest

from gfs.services.whatif.money import monthly_benefit, parse_prices

DAY_S = 86400.0


def test_ten_gpu_hours_a_day_at_two_dollars_is_six_hundred_a_month() -> None:
    # GFS kept 30 spot GPU-hours busy in one day of log, the other policy 20: 10 GPU-hours a day
    # more, at $2 per GPU-hour, over a 30-day month: 10 x 2 x 30 = $600.
    b = monthly_benefit({"A100": 30.0}, {"A100": 20.0}, {"A100": 2.0}, DAY_S)
    assert b.usd_per_month == pytest.approx(600.0)
    assert b.by_pool == {"A100": pytest.approx(600.0)}
    assert b.gpu_hours_per_day == {"A100": pytest.approx(10.0)}


def test_the_log_span_scales_to_a_month() -> None:
    # Three days of log with 15 GPU-hours more in all: 5 a day; at $4: 5 x 4 x 30 = $600.
    b = monthly_benefit({"H100": 40.0}, {"H100": 25.0}, {"H100": 4.0}, 3 * DAY_S)
    assert b.usd_per_month == pytest.approx(600.0)
    # Six hours of log with 1 GPU-hour more: 4 a day; at $1.5: 4 x 1.5 x 30 = $180.
    b = monthly_benefit({"A10": 3.0}, {"A10": 2.0}, {"A10": 1.5}, 6 * 3600.0)
    assert b.usd_per_month == pytest.approx(180.0)


def test_pools_add_up_a_loss_is_negative_and_an_unpriced_pool_is_named_not_summed() -> None:
    # A100: +10/day at $2 = +600; A10: -2/day at $1 = -60; L40: +1/day, no price.
    b = monthly_benefit(
        {"A100": 30.0, "A10": 1.0, "L40": 1.0}, {"A100": 20.0, "A10": 3.0}, {"A100": 2.0, "A10": 1.0}, DAY_S
    )
    assert b.by_pool == {"A100": pytest.approx(600.0), "A10": pytest.approx(-60.0)}
    assert b.usd_per_month == pytest.approx(540.0)
    assert b.unpriced == ("L40",)
    assert b.gpu_hours_per_day["L40"] == pytest.approx(1.0)


def test_an_empty_log_and_bad_prices_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match="nothing to scale"):
        monthly_benefit({"A100": 1.0}, {}, {"A100": 2.0}, 0.0)
    assert parse_prices(["A100=2.5", "A10=0"]) == {"A100": 2.5, "A10": 0.0}
    for bad in ("A100", "A100=", "=2", "A100=cheap", "A100=-1", "A100=nan"):
        with pytest.raises(ValueError, match="POOL=USD_PER_GPU_HOUR"):
            parse_prices([bad])
