"""Backtest, OrgLinear and the CLI on small synthetic series."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from ml_builders import seasonal_series, step_series
from typer.testing import CliRunner

from gfs.ml.backtest import rolling_cells, run_backtest, score
from gfs.ml.cli import app
from gfs.ml.datasets import write_csv
from gfs.ml.networks import OrgLinear
from gfs.ml.training import OrgLinearTraining
from gfs.ml.zoo import build_forecaster


def test_score_by_hand() -> None:
    # y = [10, 10], q50 = [8, 11] -> mae 1.5, rmse sqrt((4+1)/2); q90 = [9, 12]:
    # pinball 0.9*(10-9)=0.9 and 0.1*(12-10)=0.2 -> mean 0.55; coverage 1/2
    s = score(np.array([10.0, 10.0]), np.array([8.0, 11.0]), np.array([9.0, 12.0]))
    assert s == pytest.approx({"mae": 1.5, "rmse": np.sqrt(2.5), "coverage_p90": 0.5, "pinball_p90": 0.55})


def test_backtest_reports_every_model_and_field() -> None:
    s = step_series(days=12, tenants=3)
    out = run_backtest(s, ["last-value", "seasonal-naive", "ewma"], holdout_days=2)
    assert set(out["models"]) == {"last-value", "seasonal-naive", "ewma"}
    m = out["models"]["last-value"]
    for key in ("mae", "rmse", "coverage_p90", "pinball_p90", "train_s", "infer_ms_per_100_series"):
        assert np.isfinite(m[key])
    assert set(m["per_horizon"]) == {"1", "2", "3", "4"}
    assert len(m["per_tenant"]) == 3 and "pool-a" in m["per_pool"]


def test_backtest_cells_do_not_depend_on_later_data() -> None:
    # Holdout forecasts from origins <= 250 must not change when hours >= 250 are rewritten:
    # compare the cells whose origin (target - h) is before 250.
    s = step_series(days=12, tenants=2)
    altered = type(s)(s.keys, s.values.copy(), s.start)
    altered.values[250:] += 40
    t0 = 240
    a = rolling_cells(build_forecaster("ewma", s.keys), s, t0)
    b = rolling_cells(build_forecaster("ewma", s.keys), altered, t0)
    for h in range(4):
        n = 250 - t0 + h  # targets t0 .. 249 + h have origin target - h <= 249
        np.testing.assert_array_equal(a.q90[h, :n], b.q90[h, :n])
        assert not np.array_equal(a.q90[h, n + 5 :], b.q90[h, n + 5 :])


def test_orglinear_head_parameter_count_matches_the_spec() -> None:
    # spec 3.2: each head is Linear(672 + 24 + 24 -> 4) = 720*4 + 4 = 2884, three heads = 8652
    net = OrgLinear(lookback=672, horizon=4, class_dims=(6, 1, 84))
    heads = sum(p.numel() for lin in (net.lin_s, net.lin_t, net.lin_sigma) for p in lin.parameters())
    assert heads == 8652
    mu, sigma = net(
        torch.zeros(2, 5, 672), torch.zeros(5, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long)
    )
    assert mu.shape == sigma.shape == (2, 4, 5) and bool((sigma > 0).all())


def test_orglinear_trains_and_forecasts_gaussian_pool() -> None:
    s = seasonal_series(days=30, tenants=2)
    f = build_forecaster("orglinear", s.keys, start=s.start, lookback=336)
    f.model.train_config = OrgLinearTraining(max_epochs=2)  # type: ignore[attr-defined]
    f.fit(s.keys, s.values, 600)
    fc = f.predict(s.keys, s.values, 620, 4)
    assert fc.q90.shape == (4, 2) and np.all(fc.q90 >= fc.q50)
    # pool sigma = sqrt(sum sigma^2) -> pool q90 - pool mu = z * that
    mu_pool = fc.mean[:, [0]].sum(axis=1)
    expected = mu_pool + 1.2815515655446004 * np.sqrt((fc.std[:, [0]] ** 2).sum(axis=1))
    np.testing.assert_allclose(fc.pool_quantile("pool-a", 0.9), np.maximum(expected, 0), rtol=1e-6)


def test_cli_train_and_backtest(tmp_path: Path) -> None:
    s = step_series(days=12, tenants=2)
    csv = tmp_path / "series.csv"
    write_csv(s, csv)
    runner = CliRunner()
    args = ["backtest", "--series", str(csv), "--holdout-days", "2", "--models", "last-value,ewma"]
    res = runner.invoke(app, [*args, "--json", str(tmp_path / "bt.json")])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "bt.json").read_text())
    assert set(data["models"]) == {"last-value", "ewma"}
    res = runner.invoke(app, ["train", "--series", str(csv), "--model", "nope", "--out", str(tmp_path / "a")])
    assert res.exit_code != 0
