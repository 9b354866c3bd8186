"""`gfs simulate` on the 20-row GFS-format fixture: JSON and report are complete."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from services.cli import build_app

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gfs_trace_20"
METRICS = {
    "lp_eviction_rate",
    "lp_queue_delay_mean_s",
    "lp_queue_delay_p99_s",
    "hp_queue_delay_mean_s",
    "hp_queue_delay_p99_s",
    "hp_slo_attainment",
    "gpu_allocation_rate",
    "useful_gpu_time_rate",
    "lp_gpu_hours_completed",
    "lp_jct_mean_s",
    "evictions",
    "tasks_finished",
    "tasks_unfinished",
}


def test_simulate_fixture_writes_json_and_report(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    report = tmp_path / "report"
    result = CliRunner().invoke(
        build_app(),
        [
            "simulate",
            "--trace",
            str(FIXTURE),
            "--format",
            "gfs",
            "--policy",
            "gfs",
            "--policy",
            "fifo",
            "--forecast",
            "persistence",
            "--seed",
            "0",
            "--json",
            str(out),
            "--report",
            str(report),
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert set(data["policies"]) == {"gfs", "fifo"}
    for metrics in data["policies"].values():
        assert set(metrics) >= METRICS
        assert {"forecast", "sim_wall_s", "events", "pools"} <= set(metrics)
        assert set(metrics["forecast"]) >= {"name", "version", "fallback_count"}
        assert set(metrics["pools"]) == {"A10", "A100-SXM4-80GB", "H800"}
        for pool in metrics["pools"].values():
            assert set(pool) >= METRICS
        # every one of the 20 jobs is submitted inside the (whole-trace) window and finishes
        assert metrics["tasks_finished"] + metrics["tasks_unfinished"] == 20
    assert data["settings"]["forecast"] == "persistence"
    for name in (
        "report.md",
        "allocation.png",
        "quota_vs_demand.png",
        "eviction_rate.png",
        "queue_delay_cdf.png",
    ):
        assert (report / name).stat().st_size > 0
    assert "| lp_eviction_rate |" in (report / "report.md").read_text()
