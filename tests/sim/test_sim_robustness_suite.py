"""The robustness suite's machinery end to end, on the committed smoke config over a tiny cluster.

`gfs evaluate` runs the suite's test seeds, then its dev seeds into the same cells file, then
rebuilds the report from the cells alone; the frozen config reproduces the cells. The config's
rules (disjoint seeds, known generators, pools that exist) are refused before any cell runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gfs.services.cli import build_app
from gfs.services.simulator.evaluate import REPORT_METRICS, grid_cells, run_cell
from gfs.services.simulator.evaluate_config import load_config, parse_config
from gfs.services.simulator.evaluate_suite import ratio, suite_aggregate

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "configs" / "suite-robustness-smoke.yaml"
SUITE = ROOT / "configs" / "suite-robustness.yaml"
NODES = ROOT / "tests" / "fixtures" / "nodes_small" / "node_info_df.csv"  # 437 nodes, ~1,000 GPUs


def _tiny(tmp_path: Path) -> Path:
    """The committed smoke suite on the fixture inventory, shorter: a few seconds a cell."""
    data = yaml.safe_load(SMOKE.read_text())
    data.update(nodes=str(NODES), node_fraction=0.1, generator={"days": 12}, window_days=3, drain_days=0.5)
    data["regimes"] = [r for r in data["regimes"] if r["name"] != "mmpp-light"]  # one of each kind
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _run(*args: str) -> str:
    result = CliRunner().invoke(build_app(), ["evaluate", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_suite_runs_reports_every_regime_and_rebuilds_from_cells(tmp_path: Path) -> None:
    config, out = _tiny(tmp_path), tmp_path / "report"
    _run("--config", str(config), "--out", str(out), "--workers", "1")
    report = json.loads((out / "report.json").read_text())
    suite = report["aggregate"]["suite"]
    assert report["header"]["split"] == "test" and suite["seeds"] == [2]
    assert set(suite["regimes"]) == {"synth", "mmpp-gang-storm"}
    for regime in suite["regimes"].values():
        assert set(regime["table"]) == {"gfs", "fifo"}
        assert set(regime["ratio"]) == {
            "lp_eviction_rate_in_window", "lp_queue_delay_mean_s", "lp_gpu_hours_completed_in_window",
            "hp_queue_delay_mean_s", "idle_fit_gpu_hours",
        }  # fmt: skip
        assert regime["workload"]["hp_load_window"]["mean"] > 0
    gang = suite["regimes"]["mmpp-gang-storm"]["workload"]
    assert gang["pools"]["mean"] == 2  # the regime's pool subset
    assert gang["hp_load_window"]["mean"] == pytest.approx(0.8, rel=0.25)  # mmpp meets its load
    text = (out / "report.md").read_text()
    for needle in (
        "## Regime `synth`",
        "## Regime `mmpp-gang-storm`",
        "## Worst case over regimes",
        "gfs / fifo",
        "## Against the targets (gfs / fifo, ratio of the means)",
    ):
        assert needle in text
    assert (out / "regimes.png").stat().st_size > 0
    # The dev seeds go into the same cells file; the test report is unchanged by them.
    _run("--config", str(config), "--out", str(out), "--workers", "1", "--split", "dev", "--resume")
    dev = json.loads((out / "report.json").read_text())
    assert dev["aggregate"]["suite"]["seeds"] == [1]
    _run("--config", str(config), "--out", str(out), "--report-only")
    rebuilt = (out / "report.md").read_text()
    assert rebuilt.split("- wall time")[0] == text.split("- wall time")[0]
    assert json.loads((out / "report.json").read_text())["aggregate"] == report["aggregate"]
    # The frozen config reruns a cell to the same numbers.
    frozen = load_config(out / "config.frozen.json").frozen()
    assert frozen.digest() == report["header"]["config_sha256"]
    cell = next(c for c in grid_cells(frozen) if c.regime == "mmpp-gang-storm" and c.policy == "fifo")
    again = run_cell(frozen, cell)
    saved = next(r for r in report["results"] if r["key"] == cell.key)
    assert again["metrics"] == saved["metrics"] and again["trace_sha256"] == saved["trace_sha256"]


def _suite(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(SMOKE.read_text())
    data["nodes"] = str(NODES)
    data.update(changes)
    return data


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dev_seeds": [1, 2], "test_seeds": [2, 3]}, "disjoint"),
        ({"dev_seeds": []}, "dev_seeds"),
        ({"baseline": "lyra"}, "baseline"),
        ({"regimes": [{"name": "x", "generator": "poisson"}]}, "unknown generator"),
        ({"regimes": [{"name": "x", "generator": "synth", "load": 1.2}]}, "scale"),
        ({"regimes": [{"name": "x", "generator": "mmpp", "params": {"hp_load": 0.5}}]}, "regime's load"),
        ({"regimes": [{"name": "x", "generator": "mmpp", "params": {"seed": 3}}]}, "seed"),
        ({"regimes": [{"name": "x"}, {"name": "x"}]}, "duplicate"),
        ({"regimes": [{"name": "x", "colour": "red"}]}, "unknown keys"),
    ],
)
def test_suite_rules_are_checked_when_the_config_is_read(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_config(_suite(**changes))


def test_frozen_suite_expands_every_parameter_and_checks_pools() -> None:
    cfg = parse_config(_suite()).frozen()
    mmpp = cfg.regime("mmpp-light")
    assert mmpp.params["days"] == 36 and mmpp.params["load_start_day"] == 32  # the scored window
    assert "hp_load" not in mmpp.params and mmpp.load == 0.5
    synth = cfg.regime("synth")
    assert synth.params["scale"] == 0.05 and synth.params["days"] == 36  # scale = node fraction
    assert cfg.frozen().digest() == cfg.digest()  # freezing twice changes nothing
    with pytest.raises(ValueError, match="B200"):
        parse_config(_suite(regimes=[{"name": "x", "generator": "mmpp", "pools": ["B200"]}])).frozen()
    with pytest.raises(ValueError, match="unknown synth"):
        parse_config(_suite(regimes=[{"name": "x", "params": {"dayz": 3}}])).frozen()


def test_committed_suite_config_is_a_valid_suite() -> None:
    cfg = load_config(SUITE)
    assert cfg.is_suite and not set(cfg.dev_seeds) & set(cfg.test_seeds)
    assert {"gfs", "fifo", "k8s-priority", "lyra", "fgd"} <= set(cfg.policies)
    assert {r.generator for r in cfg.regimes} == {"synth", "mmpp"}
    assert len(grid_cells(cfg, "test")) == len(cfg.regimes) * len(cfg.policies) * len(cfg.test_seeds)


def test_ratio_and_worst_case_arithmetic() -> None:
    assert ratio(1.0, 2.0) == 0.5
    assert ratio(1.0, 0.0) == float("inf")
    assert ratio(0.0, 0.0) != ratio(0.0, 0.0)  # nan: nothing to compare
    cfg = parse_config(_suite(policies=["gfs", "fifo"]))

    def cell(regime: str, policy: str, seed: int, rate: float) -> dict[str, Any]:
        metrics = dict.fromkeys(REPORT_METRICS, 1.0) | {"lp_eviction_rate_in_window": rate}
        workload = {"hp_load_window": 0.5, "spot_load_window": 0.1, "gpus": 8.0, "pools": 1}
        c = {"study": "regime", "policy": policy, "seed": seed, "regime": regime}
        return {"cell": c, "metrics": metrics, "jobs": 10, "workload": workload}

    results = [
        cell("synth", "gfs", 2, 0.01), cell("synth", "fifo", 2, 0.02),
        cell("mmpp-light", "gfs", 2, 0.03), cell("mmpp-light", "fifo", 2, 0.01),
        cell("mmpp-light", "gfs", 1, 9.0),  # a dev seed: not in the test report
    ]  # fmt: skip
    agg = suite_aggregate(cfg, results, "test")
    assert agg["regimes"]["synth"]["ratio"]["lp_eviction_rate_in_window"]["of_means"] == pytest.approx(0.5)
    worst = agg["worst"]
    assert worst["policies"]["gfs"]["lp_eviction_rate_in_window"] == {"value": 0.03, "regime": "mmpp-light"}
    assert worst["ratio"]["lp_eviction_rate_in_window"]["regime"] == "mmpp-light"
    assert worst["ratio"]["lp_eviction_rate_in_window"]["value"] == pytest.approx(3.0)
