"""Observed HP demand (issue 10): running plus queued HP GPUs, per-minute samples, hourly peaks.

Every expected value is worked out by hand in the comments."""

from __future__ import annotations

import numpy as np
import pytest

from gfs.services.core.observed_demand import ObservedDemand

P, Q = ("P", "a"), ("Q", "b")


def test_minutes_sample_after_the_events_at_that_instant() -> None:
    # 2 hours, one series. +8 at t = 0 (sampled at minute 0: events at t are applied first);
    # +4 at 600 (minute 10) -> 12; -8 at 3000 (minute 50) -> 4; -4 at 3630 (between minutes 60
    # and 61: minute 60 still sees 4, minute 61 sees 0). Hour 0 peak 12; hour 1 peak 4.
    d = ObservedDemand([P], 2)
    d.add(0.0, P, 8)
    d.add(600.0, P, 4)
    d.remove(3000.0, P, 8)
    d.remove(3630.0, P, 4)
    d.advance(7200.0)
    assert d.hourly[:, 0].tolist() == [12.0, 4.0]
    assert d.complete_hours == 2


def test_a_change_between_two_minutes_that_never_lasts_to_one_is_not_seen() -> None:
    # +10 at 30 s, -10 at 50 s: no minute boundary in between -> hour 0 peak 0.
    d = ObservedDemand([P], 1)
    d.add(30.0, P, 10)
    d.remove(50.0, P, 10)
    d.advance(3600.0)
    assert d.hourly[0, 0] == 0.0


def test_pool_peak_is_the_peak_of_the_total_not_the_sum_of_peaks() -> None:
    # Two tenants of pool P: a holds 6 during minutes 0-29, b holds 6 during minutes 30-59.
    # Tenant peaks 6 and 6 (sum 12); the pool's per-minute total never exceeds 6.
    a, b = ("P", "a"), ("P", "b")
    d = ObservedDemand([a, b, Q], 1)
    d.add(0.0, a, 6)
    d.remove(1800.0, a, 6)
    d.add(1800.0, b, 6)
    d.advance(3600.0)
    assert d.keys == (a, b, Q) and d.pools == ("P", "Q")
    assert d.hourly[0].tolist() == [6.0, 6.0, 0.0]
    assert d.pool_hourly[0].tolist() == [6.0, 0.0]


def test_hours_not_over_stay_open_and_a_long_gap_fills_every_hour() -> None:
    # 5 GPUs from t = 0; nothing changes until 4.5 h: hours 0-3 peak 5; hour 4 not complete yet.
    d = ObservedDemand([P], 6)
    d.add(0.0, P, 5)
    d.advance(4.5 * 3600)
    assert d.complete_hours == 4
    assert d.hourly[:, 0].tolist() == [5.0, 5.0, 5.0, 5.0, 5.0, 0.0]  # hour 4 has 31 samples so far


def test_fractional_requests_do_not_leave_float_noise() -> None:
    d = ObservedDemand([P], 2)
    for _ in range(10):
        d.add(0.0, P, 0.1)
    for _ in range(10):
        d.remove(60.0, P, 0.1)
    d.advance(7200.0)
    assert d.hourly[:, 0].tolist() == [1.0, 0.0]  # 0.1 x 10 is 1.0 at minute 0, exactly 0 after


def test_time_going_back_and_unknown_series_are_refused() -> None:
    d = ObservedDemand([P], 1)
    d.add(100.0, P, 1)
    with pytest.raises(ValueError, match="time went back"):
        d.add(50.0, P, 1)
    with pytest.raises(KeyError, match="not one of"):
        d.add(200.0, ("P", "zzz"), 1)
    with pytest.raises(ValueError, match="n_hours"):
        ObservedDemand([P], 0)


def test_samples_past_the_last_row_are_dropped() -> None:
    d = ObservedDemand([P], 1)
    d.add(0.0, P, 3)
    d.advance(10 * 3600.0)
    assert np.array_equal(d.hourly, np.array([[3.0]]))


def test_a_cancelled_task_stops_counting_at_its_cancel() -> None:
    # Queued HP task of 4 GPUs accepted at 0, cancelled at 1800 (the driver calls remove then):
    # minutes 0-29 see 4, minutes 30-59 see 0 -> hour 0 peak 4, hour 1 peak 0.
    d = ObservedDemand([P], 2)
    d.add(0.0, P, 4)
    d.remove(1800.0, P, 4)
    d.advance(7200.0)
    assert d.hourly[:, 0].tolist() == [4.0, 0.0]
