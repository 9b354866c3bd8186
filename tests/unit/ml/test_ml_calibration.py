"""Calibration and baselines: quantiles worked by hand, pool quantile vs summed quantiles."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from gfs.ml.baselines import Ewma, LastValue, SeasonalNaive
from gfs.ml.calibrated import CalibratedForecaster
from gfs.ml.calibration import calibration_cells, residual_quantile


def test_residual_quantile_linear_by_hand() -> None:
    # residuals 0..29 (n=30): the 0.9 quantile at position 0.9 * 29 = 26.1 -> 26 + 0.1 = 26.1
    r = np.arange(30.0)[:, None]
    assert residual_quantile(r, 0.9)[0] == pytest.approx(26.1)


def test_too_few_residuals_means_no_shift() -> None:
    assert residual_quantile(np.ones((5, 2)), 0.9).tolist() == [0.0, 0.0]


def test_calibration_cells_only_use_known_targets() -> None:
    # origin 200, window 168, horizon 2: h=0 origins 32..199 (targets 32..199);
    # h=1 origins 31..198 (targets 32..199)
    cells = calibration_cells(200, 2, first_origin=1, window=168)
    assert (cells[0][0], cells[0][-1], len(cells[0])) == (32, 199, 168)
    assert (cells[1][0], cells[1][-1], len(cells[1])) == (31, 198, 168)


def test_last_value_q90_is_last_plus_residual_quantile() -> None:
    # A series alternating 10, 12, 10, 12 ...: horizon-1 residuals of persistence are +2 / -2
    # half the time each; their linear 0.9 quantile is 2, so q90 = last + 2.
    values = np.tile([[10.0], [12.0]], (100, 1))
    f = CalibratedForecaster(LastValue())
    fc = f.predict((("p", "a"),), values, 200, 1)  # last value (hour 199) is 12
    assert fc.q50[0, 0] == 12.0
    assert fc.q90[0, 0] == pytest.approx(14.0)
    assert not fc.fallback


def test_pool_quantile_is_not_the_sum_of_tenant_quantiles() -> None:
    # Four independent noisy tenants: the pool's 0.9 quantile is well below the summed ones.
    rng = np.random.default_rng(0)
    values = 50 + rng.normal(0, 5, (400, 4)).round()
    keys = tuple(("p", f"t{j}") for j in range(4))
    fc = CalibratedForecaster(LastValue()).predict(keys, values, 400, 2)
    summed = fc.q90.sum(axis=1)
    pool = fc.pool_quantile("p", 0.9)
    assert pool.shape == (2,)
    assert np.all(pool < summed - 5)
    assert np.all(pool > fc.q50.sum(axis=1))


def test_seasonal_naive_reads_yesterday_same_hour() -> None:
    values = np.arange(48.0)[:, None]
    point, _ = SeasonalNaive(24).raw((("p", "a"),), values, np.array([30]), 2)
    assert point[0, :, 0].tolist() == [6.0, 7.0]  # hours 30, 31 -> 6, 7


def test_ewma_weights_by_hand() -> None:
    # alpha 0.5, span 2, history [.., 4, 8]: (0.5*8 + 0.25*4) / 0.75 = 20/3
    e = Ewma(alpha=0.5, span=2)
    point, _ = e.raw((("p", "a"),), np.array([[4.0], [8.0]]), np.array([2]), 1)
    assert point[0, 0, 0] == pytest.approx(20 / 3)


def test_short_history_falls_back_to_flagged_persistence() -> None:
    f = CalibratedForecaster(SeasonalNaive(24))
    fc = f.predict((("p", "a"),), np.full((10, 1), 3.0), 10, 4)
    assert fc.fallback and f.fallback_count == 1
    assert fc.q50[:, 0].tolist() == [3.0] * 4


@given(arrays(np.float64, (80, 3), elements=st.integers(0, 60).map(float)), st.integers(30, 80))
def test_quantiles_are_ordered_and_non_negative(values: np.ndarray, end: int) -> None:
    keys = tuple(("p", f"t{j}") for j in range(3))
    fc = CalibratedForecaster(Ewma()).predict(keys, values, end, 4)
    assert fc.q50.shape == fc.q90.shape == fc.std.shape == (4, 3)
    assert np.all(fc.q50 >= 0) and np.all(fc.q90 >= fc.q50) and np.all(fc.std >= 0)
    assert np.all(fc.pool_quantile("p", 0.9) >= 0)


class _FixedSpread:
    """Stub raw model: point = last value, raw q90 = point + 3."""

    name, version, min_history = "stub", "0", 1

    def fit(self, keys, values, end_hour):  # type: ignore[no-untyped-def]
        """Nothing to learn."""

    def raw(self, keys, values, origins, horizon):  # type: ignore[no-untyped-def]
        point, _ = LastValue().raw(keys, values, origins, horizon)
        return point, point + 3.0


def test_quantile_head_is_shifted_by_its_residuals_and_pooled_in_quadrature() -> None:
    # Two tenants at a constant 10 GPUs. Per series: residual y - raw q90 = 10 - 13 = -3 in every
    # calibration cell, so q90 = 13 - 3 = 10. Pool: raw = 20 + sqrt(3^2 + 3^2) = 24.243, residual
    # 20 - 24.243 = -4.243 everywhere, so the pool q90 = 24.243 - 4.243 = 20.
    keys = (("p", "a"), ("p", "b"))
    fc = CalibratedForecaster(_FixedSpread()).predict(keys, np.full((300, 2), 10.0), 300, 3)
    np.testing.assert_allclose(fc.q90, 10.0)
    np.testing.assert_allclose(fc.pool_quantile("p", 0.9), 20.0)
