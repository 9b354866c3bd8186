"""The coverage report (ml/coverage.py, `gfs forecast coverage`): floors worked by hand, the
seen / unseen split and the CLI on a small series."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gfs.ml.baselines import LastValue
from gfs.ml.calibrated import CalibratedForecaster
from gfs.ml.cli import app
from gfs.ml.coverage import TenantCoverage, coverage_report, group_summary
from gfs.ml.datasets import write_csv
from gfs.ml.series import SIMULATOR_ORIGIN, DemandSeries


def _tenant(coverage: float, floors: tuple[float, ...], mean: float = 10.0) -> TenantCoverage:
    return TenantCoverage("p", "t", False, mean, coverage, floors, 1.0, (coverage,) * len(floors))


def test_best_possible_coverage_by_hand() -> None:
    # floors 0.97, 0.93, 0.85, 0.80: a q90 calibrated wherever it can be covers
    # (0.97 + 0.93 + 0.9 + 0.9) / 4 = 0.925 > 0.92: floor bound, although the mean floor is 0.8875.
    t = _tenant(0.93, (0.97, 0.93, 0.85, 0.80))
    assert t.floor == pytest.approx(0.8875)
    assert t.best == pytest.approx(0.925) and t.floor_bound and not t.in_band
    u = _tenant(0.91, (0.95, 0.85, 0.80, 0.80))  # (0.95 + 0.9 * 3) / 4 = 0.9125: reachable
    assert u.best == pytest.approx(0.9125) and not u.floor_bound and u.in_band


def test_group_summary_counts_reachable_tenants_and_skips_idle_ones() -> None:
    group = [
        _tenant(0.93, (0.97, 0.93, 0.85, 0.80)),  # floor bound, out of band
        _tenant(0.91, (0.5,) * 4),  # in band
        _tenant(0.86, (0.5,) * 4),  # reachable, out of band
        _tenant(1.0, (1.0,) * 4, mean=0.0),  # no demand: left out
    ]
    s = group_summary(group)
    assert (s["tenants"], s["in_band"], s["floor_bound"], s["reachable"], s["in_band_of_reachable"]) == (
        3,
        1,
        1,
        2,
        1,
    )
    assert s["pooled"] == pytest.approx((0.93 + 0.91 + 0.86) / 3) and s["median"] == pytest.approx(0.91)


def _series() -> DemandSeries:
    rng = np.random.default_rng(5)
    n = 400
    jumps = rng.normal(0.0, 3.0, (n, 3)) * (rng.random((n, 3)) < 0.4)
    values = np.maximum(0.0, np.round(20.0 + np.cumsum(jumps, axis=0)))
    values[:, 2] = 0.0  # an idle tenant
    keys = (("a", "org-1"), ("a", "org-2"), ("b", "org-3"))
    return DemandSeries(keys, values, SIMULATOR_ORIGIN)


def test_report_splits_seen_and_unseen_and_reports_every_pool() -> None:
    s = _series()
    rep = coverage_report(CalibratedForecaster(LastValue()), s, 200, lambda t: t == "org-1")
    assert rep["hours"] == 200 and set(rep["pools"]) == {"a", "b"}
    assert rep["groups"]["seen"]["tenants"] == 1 and rep["groups"]["unseen"]["tenants"] == 1  # org-3 idle
    t = rep["tenants"]["a/org-1"]
    assert t["seen"] and 0.0 <= t["floor"] <= t["coverage"] <= 1.0 and len(t["per_horizon"]) == 4


def test_cli_writes_before_and_after_reports(tmp_path: Path) -> None:
    csv = tmp_path / "series.csv"
    write_csv(_series(), csv)
    out = tmp_path / "cov.json"
    res = CliRunner().invoke(
        app, ["coverage", "--series", str(csv), "--json", str(out), "--start-hour", "250"]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert set(data["reports"]) == {"last-value", "last-value + online"}
    assert "| a/org-1 | no |" in res.output  # no artifact: nobody is seen
    bad = CliRunner().invoke(app, ["coverage", "--series", str(csv), "--online", "maybe"])
    assert bad.exit_code != 0


def test_cli_output_json_prints_only_the_reports_on_stdout(tmp_path: Path) -> None:
    csv = tmp_path / "series.csv"
    write_csv(_series(), csv)
    res = CliRunner().invoke(app, ["coverage", "--series", str(csv), "--start-hour", "250", "-o", "json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)  # progress went to stderr: stdout is the one document
    assert set(data["reports"]) == {"last-value", "last-value + online"}
    assert data["artifact"] == "None" and data["reports"]["last-value"]["tenants"]["a/org-1"]["seen"] is False
    assert "last-value: done" in res.stderr
    bad = CliRunner().invoke(app, ["coverage", "--series", str(csv), "-o", "yaml"])
    assert bad.exit_code != 0
