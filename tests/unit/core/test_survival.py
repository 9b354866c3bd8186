"""The quoted survival probability (issue 27 item 1), against hand-worked values.

The pool of the tests: 100 GPUs, 20 spot GPUs running (kept over the new task), a new task of
8 GPUs, so HP may grow to K = 100 - 20 - 8 = 72 GPUs before the task is the one evicted. The HP
demand forecast per hour ahead is Normal with means 60, 64, 68, 72 and stds 6, 8, 4, 10, so the
z-scores (72 - mean) / std are 2, 1, 1, 0 and the hours survive with Phi(2) = 0.97725,
Phi(1) = 0.84134, Phi(1) = 0.84134 and Phi(0) = 0.5 (standard normal table).
"""

from __future__ import annotations

import pytest

from gfs.services.core.survival import (
    DEFAULT_RECALIBRATION,
    HpOutlook,
    PoolTerms,
    QuoteCalibration,
    Recalibration,
    hour_survival,
    quote,
    raw_survival,
    survival_probability,
)

PHI_2 = 0.9772499
PHI_1 = 0.8413447
OUTLOOK = HpOutlook(mean=(60.0, 64.0, 68.0, 72.0), std=(6.0, 8.0, 4.0, 10.0))
POOL = {"capacity": 100.0, "task_gpus": 8.0, "spot_kept": 20.0, "hp_now": 50.0}


def p(hours: int, outlook: HpOutlook = OUTLOOK, **changes: float) -> float:
    return survival_probability(hours, outlook=outlook, **{**POOL, **changes})


def test_one_hour_is_the_first_forecast_hour() -> None:
    # An off-by-one (hour 2's forecast for the first hour) would give Phi(1) = 0.841.
    assert p(1) == pytest.approx(PHI_2, abs=1e-6)


def test_longer_durations_take_the_worst_hour_within_them() -> None:
    assert p(2) == pytest.approx(PHI_1, abs=1e-6)  # min(Phi(2), Phi(1))
    assert p(3) == pytest.approx(PHI_1, abs=1e-6)  # hour 3 is no worse than hour 2
    assert p(4) == pytest.approx(0.5, abs=1e-6)  # hour 4's mean sits exactly on the slack


def test_the_spread_matters() -> None:
    # Hour 1 with std 12 instead of 6: z = 12 / 12 = 1. Ignoring the std would leave a step
    # (mean 60 <= 72: probability 1).
    wider = HpOutlook(mean=OUTLOOK.mean, std=(12.0, 8.0, 4.0, 10.0))
    assert p(1, wider) == pytest.approx(PHI_1, abs=1e-6)


def test_the_slack_counts_capacity_kept_spot_and_the_task() -> None:
    # 4 more spot GPUs kept over the task: K = 68, hour 1 z = (68 - 60) / 6 = 4/3.
    assert p(1, spot_kept=24.0) == pytest.approx(0.9087888, abs=1e-6)
    # A 2-GPU task instead of 8: K = 78, hour 2 z = (78 - 64) / 8 = 1.75 -> 0.9599408.
    assert p(2, task_gpus=2.0) == pytest.approx(0.9599408, abs=1e-6)
    # 10 GPUs fewer in the pool: K = 62, hour 1 z = 2 / 6.
    assert p(1, capacity=90.0) == pytest.approx(0.6305587, abs=1e-6)


def test_hp_already_here_beyond_the_slack_means_certain_eviction() -> None:
    assert p(1, hp_now=73.0) == 0.0  # HP running + queued exceeds K = 72 already
    assert p(1, hp_now=72.0) == pytest.approx(PHI_2, abs=1e-6)  # exactly K still fits


def test_a_certain_forecast_is_a_step() -> None:
    assert hour_survival(72.0, 72.0, 0.0, 0.0) == 1.0
    assert hour_survival(72.0, 72.5, 0.0, 0.0) == 0.0


def test_hours_beyond_the_horizon_repeat_its_last_hour() -> None:
    short = HpOutlook(mean=(60.0, 64.0), std=(6.0, 8.0))
    assert p(4, short) == pytest.approx(PHI_1, abs=1e-6)


def test_outlook_from_quantiles_matches_a_normal() -> None:
    # Median 60 and 0.9-quantile 60 + 1.2815516 x 6: std 6.
    o = HpOutlook.from_quantiles([60.0], [60.0 + 1.2815516 * 6.0])
    assert o.mean == (60.0,)
    assert o.std[0] == pytest.approx(6.0, abs=1e-5)


def test_quote_carries_the_guarantee_and_every_offered_duration() -> None:
    q = quote(2, outlook=OUTLOOK, **POOL)
    assert q.guarantee_hours == 2
    assert q.guarantee == 0.841
    assert dict(q.by_hours) == {1: 0.977, 2: 0.841, 4: 0.5}


def test_recalibration_is_piecewise_linear_and_flat_outside() -> None:
    r = Recalibration(x=(0.5, 0.9), y=(0.4, 0.8))
    assert r(0.7) == pytest.approx(0.6)
    assert r(0.3) == 0.4
    assert r(0.95) == 0.8
    assert Recalibration()(0.37) == 0.37
    q = quote(1, outlook=OUTLOOK, recalibration=r, **POOL)
    assert q.guarantee == 0.8  # raw 0.977 is beyond the last knot


def test_recalibration_must_be_monotone() -> None:
    with pytest.raises(ValueError, match="non-decreasing"):
        Recalibration(x=(0.5, 0.9), y=(0.8, 0.4))


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="hours"):
        p(0)
    with pytest.raises(ValueError, match="no forecast"):
        p(1, HpOutlook((), ()))
    with pytest.raises(ValueError, match="std"):
        HpOutlook((1.0,), (-1.0,))


def test_a_waiting_task_is_quoted_the_quotas_promise() -> None:
    admitted = PoolTerms(100.0, 8.0, 20.0, 50.0, waiting=False, guarantee_rate=0.95)
    waiting = PoolTerms(100.0, 8.0, 20.0, 50.0, waiting=True, guarantee_rate=0.95)
    assert raw_survival(4, admitted, OUTLOOK) == pytest.approx(0.5, abs=1e-6)  # the model, as above
    assert raw_survival(4, waiting, OUTLOOK) == 0.95
    assert raw_survival(1, waiting, OUTLOOK) == 0.95


# A map per quoted duration. On the pool above the raw probabilities are 0.97725 (1 h),
# 0.84134 (2 h) and 0.5 (4 h). The 1 h map runs 0.9 -> 0.95 .. 1.0 -> 0.99, so 0.97725 maps to
# 0.95 + 0.04 x 0.7725 = 0.9809; the 2 h map runs 0.8 -> 0.9 .. 0.9 -> 0.94, so 0.84134 maps to
# 0.9 + 0.04 x 0.4134 = 0.91654; the 4 h map has one knot, 0.7 everywhere.
ONE_H = Recalibration(x=(0.9, 1.0), y=(0.95, 0.99))
TWO_H = Recalibration(x=(0.8, 0.9), y=(0.9, 0.94))
FOUR_H = Recalibration(x=(0.5,), y=(0.7,))
PER_DURATION = QuoteCalibration(((1, ONE_H), (2, TWO_H), (4, FOUR_H)))


def test_each_duration_is_mapped_by_its_own_recalibration() -> None:
    q = quote(2, outlook=OUTLOOK, recalibration=PER_DURATION, **POOL)
    # The 1 h map for every duration would quote 2 h at 0.95 (0.84134 is below its first knot).
    assert dict(q.by_hours) == {1: 0.981, 2: 0.917, 4: 0.7}
    assert q.guarantee == 0.917


def test_a_duration_without_a_map_uses_the_longest_fitted_below_it() -> None:
    c = QuoteCalibration(((1, ONE_H), (4, FOUR_H)))
    assert c.for_hours(2) is ONE_H and c.for_hours(3) is ONE_H
    assert c.for_hours(4) is FOUR_H and c.for_hours(8) is FOUR_H
    assert QuoteCalibration(((2, TWO_H),)).for_hours(1) is TWO_H  # none below: the shortest
    assert QuoteCalibration()(4, 0.37) == 0.37  # no maps: identity
    # One Recalibration for every duration, as before.
    q = quote(2, outlook=OUTLOOK, recalibration=TWO_H, **POOL)
    assert dict(q.by_hours) == {1: 0.94, 2: 0.917, 4: 0.9}


def test_durations_must_be_ascending_and_distinct() -> None:
    with pytest.raises(ValueError, match="ascending"):
        QuoteCalibration(((2, TWO_H), (1, ONE_H)))
    with pytest.raises(ValueError, match="ascending"):
        QuoteCalibration(((1, TWO_H), (1, ONE_H)))


def test_the_live_default_is_a_fitted_map_per_duration() -> None:
    # The maps that services/simulator/calibration.py fitted (docs/evaluation.md section 14): one
    # per quoted duration, monotone, and inside 0.9-1.0, the first-run survival the simulated
    # weeks showed at every raw probability (the raw model is conservative). Not the identity:
    # raw 0.5 is quoted at least 0.9.
    assert [h for h, _ in DEFAULT_RECALIBRATION.by_hours] == [1, 2, 4]
    grid = [i / 200 for i in range(201)]
    for h in (1, 2, 4):
        quotes = [DEFAULT_RECALIBRATION(h, p) for p in grid]
        assert quotes == sorted(quotes)
        assert min(quotes) >= 0.9 and max(quotes) <= 1.0
    assert DEFAULT_RECALIBRATION(1, 0.5) >= 0.9
