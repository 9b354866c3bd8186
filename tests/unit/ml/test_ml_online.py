"""Online recalibration (ml/online.py): the update rule worked by hand, the tracker's bookkeeping,
and the forecaster using it without reading the future."""

from __future__ import annotations

import numpy as np
import pytest

from gfs.ml.baselines import LastValue
from gfs.ml.calibrated import CalibratedForecaster
from gfs.ml.calibration import residual_quantile
from gfs.ml.online import (
    AciTracker,
    OnlineCalibration,
    OnlineSettings,
    aci_step,
    quantile_at_levels,
)

# gamma 0.05, target miss 0.1, alpha in [0.05, 0.4] (the level in [0.6, 0.95]).
RULE = {"target_miss": 0.1, "gamma": 0.05, "alpha_min": 0.05, "alpha_max": 0.4}
# The same as settings: alpha in [0.5, 4] x the target miss 0.1.
SETTINGS = OnlineSettings(gamma=0.05, min_miss_ratio=0.5, max_miss_ratio=4.0)

# Each row: alpha before, miss, alpha after, worked by hand.
#   hit:  alpha + 0.05 * (0.1 - 0) = alpha + 0.005
#   miss: alpha + 0.05 * (0.1 - 1) = alpha - 0.045
TABLE = [
    (0.100, 0, 0.105),  # a hit narrows: alpha up by 0.005
    (0.105, 1, 0.060),  # a miss widens 9 times as much: 0.105 - 0.045
    (0.060, 1, 0.050),  # 0.060 - 0.045 = 0.015 is below alpha_min 0.05: clipped
    (0.050, 0, 0.055),  # from the clip, a hit moves it again
    (0.398, 0, 0.400),  # 0.403 is above alpha_max 0.4: clipped
    (0.400, 1, 0.355),  # 0.4 - 0.045
    (0.200, 0, 0.205),
]


def test_update_rule_table_worked_by_hand() -> None:
    # A sign flip gives 0.095 in row 1, the wrong target (p = 0.9 instead of the miss rate 0.1)
    # 0.145, no clip 0.015 in row 3 and 0.403 in row 5: each fails some row.
    for before, miss, after in TABLE:
        assert float(aci_step(before, miss, **RULE)) == pytest.approx(after, abs=1e-12), (before, miss)


def test_update_rule_is_elementwise() -> None:
    before = np.array([row[0] for row in TABLE])
    misses = np.array([row[1] for row in TABLE], dtype=float)
    after = np.array([row[2] for row in TABLE])
    np.testing.assert_allclose(aci_step(before, misses, **RULE), after, atol=1e-12)


def test_long_run_miss_rate_tends_to_the_target() -> None:
    # A quantile that misses whenever its level is under the true 0.9 (a uniform variable's
    # quantile at level 1 - alpha): the rule holds alpha near 0.1 and the miss rate near 10%.
    rng = np.random.default_rng(1)
    alpha, misses = 0.3, []
    for _ in range(20_000):
        miss = float(rng.uniform() > 1.0 - alpha)
        misses.append(miss)
        alpha = float(aci_step(alpha, miss, target_miss=0.1, gamma=0.01, alpha_min=0.001, alpha_max=0.5))
    assert np.mean(misses[5000:]) == pytest.approx(0.1, abs=0.01)


def test_quantile_at_levels_matches_numpy_and_worked_example() -> None:
    # residuals 0..9 (n = 10): level 0.9 -> position 8.1 -> 8.1; level 0.855 -> 7.695 -> 7.695.
    r = np.repeat(np.arange(10.0)[:, None], 2, axis=1)
    np.testing.assert_allclose(quantile_at_levels(r, np.array([0.9, 0.855])), [8.1, 7.695])
    rng = np.random.default_rng(0)
    x = rng.normal(size=(168, 5)).round(1)
    np.testing.assert_allclose(quantile_at_levels(x, np.full(5, 0.9)), residual_quantile(x, 0.9), atol=1e-12)


def test_tracker_scores_each_published_quantile_once_when_its_target_completes() -> None:
    # Horizon 2, one key. Published at origin 10: [5, 5] for hours 10 and 11; at origin 11:
    # [8, 8] for hours 11 and 12. Actuals: hour 10 -> 6 (a miss of h0), hour 11 -> 7 (a miss of
    # origin 10's h1 (7 > 5), a hit of origin 11's h0 (7 <= 8)).
    settings = SETTINGS
    t = AciTracker(target_miss=0.1, horizon=2)
    t.publish(10, [("p", "a")], np.array([[5.0], [5.0]]))
    t.publish(11, [("p", "a")], np.array([[8.0], [8.0]]))
    actual = {10: 6.0, 11: 7.0}
    t.observe(10, 12, lambda key, hour: actual[hour], settings)
    # h0: hour 10 missed (0.1 - 0.045 = 0.055), then hour 11 hit (0.055 + 0.005 = 0.06).
    # h1: hour 11 (from origin 10) missed: 0.1 - 0.045 = 0.055.
    np.testing.assert_allclose(t.alpha[("p", "a")], [0.06, 0.055])
    np.testing.assert_allclose(t.levels([("p", "a"), ("p", "new")]), [[0.94, 0.9], [0.945, 0.9]])
    assert list(t.published) == [11]  # origin 10 fully scored; origin 11 waits for hour 12


def test_state_round_trips_through_json_with_an_hour_offset() -> None:
    state = OnlineCalibration(OnlineSettings(), 0.9, 2)
    state.through = 5
    state.series.publish(5, [("p", "a")], np.array([[1.0], [2.0]]))
    state.series.alpha[("p", "a")] = np.array([0.2, 0.05])
    state.pool_tracker(0.9).alpha[("p",)] = np.array([0.1, 0.3])
    data = state.to_json(hour_offset=1000)
    assert data["through"] == 1005 and data["series"]["published"][0][0] == 1005
    back = OnlineCalibration.from_json(data, OnlineSettings(), hour_offset=1000)
    assert back.through == 5 and list(back.series.published) == [5]
    assert back.to_json(1000) == data


def _flip(n: int) -> np.ndarray:
    return np.tile([[10.0], [12.0]], (n // 2, 1))


def test_forecaster_steps_the_level_by_hand() -> None:
    # Alternating 10, 12 (even hours 10, odd 12), persistence, horizon 1: the 168 residuals of
    # the window are 84 x -2 and 84 x +2, so any level >= 84/167 = 0.503 gives a shift of +2 and
    # q90 = last + 2 covers every hour. The first call (end 200) only publishes; each later call
    # scores the hour before it. Hours 200..259 are 60 hits: alpha 0.1 + 60 * 0.005 = 0.4, the
    # ceiling (level 0.6); hour 260..268 would push it further but the clip holds it at 0.4.
    settings = SETTINGS
    values = _flip(600)
    keys = (("p", "a"),)
    f = CalibratedForecaster(LastValue(), online=settings)
    for end in range(200, 270):
        fc = f.predict(keys, values, end, 1)
    state = f.online_state()
    assert state is not None
    assert state["series"]["alpha"][0][1][0] == pytest.approx(0.4)
    assert fc.q90[0, 0] == pytest.approx(values[268, 0] + 2.0)  # level 0.6: still the +2 atom
    # Demand jumps to 30 at hours 260..263. Hour 260: q90 = 12 + 2 = 14 < 30, a miss:
    # 0.4 - 0.045 = 0.355. Hour 261: last = 30, the window now holds one +18 residual, level
    # 0.645 (position 107.7 of 167) is still in the +2 atom: q90 = 32 >= 30, a hit: 0.36.
    # Hour 262: the same, a hit: 0.365. (The call at end 263 scores hours up to 262.)
    jumped = values.copy()
    jumped[260:264] = 30.0
    g = CalibratedForecaster(LastValue(), online=settings)
    for end in range(200, 264):
        g.predict(keys, jumped, end, 1)
    state = g.online_state()
    assert state is not None
    assert state["series"]["alpha"][0][1][0] == pytest.approx(0.365)


def test_online_state_never_reads_the_future() -> None:
    # Forecasts up to origin 300 must not depend on hours >= 300, and rewinding resets the state.
    rng = np.random.default_rng(3)
    values = 20 + rng.integers(-3, 4, (400, 2)).cumsum(axis=0).clip(-15, 40).astype(float)
    keys = (("p", "a"), ("p", "b"))
    altered = values.copy()
    altered[300:] += 50.0
    outs = []
    for v in (values, altered):
        f = CalibratedForecaster(LastValue())
        for end in range(200, 301):
            fc = f.predict(keys, v, end, 4)
            pool = fc.pool_quantile("p", 0.9)
        outs.append((fc.q90.copy(), pool.copy(), f.online_state()))
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
    assert outs[0][2] == outs[1][2]
    f = CalibratedForecaster(LastValue())
    for end in range(200, 260):
        f.predict(keys, values, end, 4)
    f.predict(keys, values, 230, 4)  # rewound: the state learnt from hours 230..259 is dropped
    state = f.online_state()
    assert state is not None and state["through"] == 230 and state["series"]["alpha"] == []


def test_default_bounds_scale_with_the_quantile() -> None:
    # alpha in [0.2, 3] x the target miss: q90 -> [0.02, 0.3] (levels 0.7..0.98); q95 ->
    # [0.01, 0.15] (0.85..0.99); the median's 1.5 is capped at 1.
    d = OnlineSettings()
    assert d.bounds(0.1) == pytest.approx((0.02, 0.3))
    assert d.bounds(0.05) == pytest.approx((0.01, 0.15))
    assert d.bounds(0.5) == pytest.approx((0.1, 1.0))
    with pytest.raises(ValueError):
        OnlineSettings(min_miss_ratio=1.5)
