"""`gfs simulate` on the 20-row GFS-format fixture: JSON and report are complete."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gfs.services.cli import build_app

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


def _simulate_decisions(tmp_path: Path, name: str) -> Path:
    log = tmp_path / name
    args = ["simulate", "--trace", str(FIXTURE), "--policy", "gfs", "--policy", "fifo", "--policy", "chronus"]
    result = CliRunner().invoke(build_app(), [*args, "--window-days", "2", "--decisions", str(log)])
    assert result.exit_code == 0, result.output
    return log


def test_simulate_decision_log_is_ordered_complete_and_deterministic(tmp_path: Path) -> None:
    log = _simulate_decisions(tmp_path, "a.jsonl")
    assert log.read_bytes() == _simulate_decisions(tmp_path, "b.jsonl").read_bytes()
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    gpus = {}
    for row in (FIXTURE / "node_info_df.csv").read_text().splitlines()[1:]:
        cells = row.split(",")
        gpus[cells[3]] = int(cells[1])
    by_policy: dict[str, list[dict[str, object]]] = {}
    for line in lines:
        by_policy.setdefault(str(line["policy"]), []).append(line)
    assert set(by_policy) == {"gfs", "fifo", "chronus"}
    for policy, rows in by_policy.items():
        times = [float(r["t"]) for r in rows]  # type: ignore[arg-type]
        assert times == sorted(times), policy
        started = {r["task"] for r in rows if r["action"] == "start"}
        assert len(started) == 20, policy  # every fixture job starts at least once
        for i, r in enumerate(rows):
            if r["action"] in ("start", "renew"):
                for p in r["placements"]:  # type: ignore[attr-defined]
                    devices = p["gpus"] if "gpus" in p else [p["gpu"]]
                    assert all(0 <= d < gpus[p["node"]] for d in devices), (policy, r)
                    assert len(set(devices)) == len(devices)
            if r["action"] == "evict":
                # the preemptor starts right after its victims, in the same pass, naming them
                later = [q for q in rows[i + 1 :] if q["pass"] == r["pass"] and q["pool"] == r["pool"]]
                start = next(q for q in later if q["task"] == r["preemptor"])
                assert start["action"] == "start" and start["preempted"] is True
                assert r["task"] in start["victims"]  # type: ignore[operator]
                assert r["reason"] == "PREEMPTED_BY_HP" and r["node"] in gpus
    assert any(r["action"] == "evict" for r in by_policy["gfs"])
    assert any(r["action"] == "renew" for r in by_policy["chronus"])


def test_simulate_quota_log_has_one_row_per_pool_and_hour_with_consistent_inputs(tmp_path: Path) -> None:
    """`--quota-log DIR`: DIR/<policy>.csv. Every row's 1-hour quota is eta x the spare it logs
    (the quota in force after that refresh), the spare is capacity minus floor(max(quantile,
    floor)) clipped at 0, and no pool is logged twice in one hour."""
    import csv
    import math

    result = CliRunner().invoke(
        build_app(),
        ["simulate", "--trace", str(FIXTURE), "--policy", "gfs", "--quota-log", str(tmp_path / "q")],
    )
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader((tmp_path / "q" / "gfs.csv").open()))
    assert rows
    seen = set()
    for r in rows:
        key = (r["pool"], int(float(r["time_s"]) // 3600))
        assert key not in seen
        seen.add(key)
        cap = float(r["capacity"])
        if r["forecast_quantile_h1"]:
            used = max(float(r["forecast_quantile_h1"]), float(r["hp_floor"] or 0.0))
            assert float(r["spare_h1"]) == cap - min(max(math.floor(used + 1e-9), 0), cap)
            quota = float(r["eta"]) * float(r["spare_h1"])
            assert math.isclose(float(r["quota_h1"]), quota, abs_tol=1e-6)
        assert float(r["hp_placeable"]) <= float(r["hp_running"]) + float(r["hp_queued"]) + 1e-9
    # The idle-wait summary counts exactly the rows where spot waited > 1 h with >= 20% idle.
    summary = json.loads((tmp_path / "q" / "gfs.idle-waits.json").read_text())
    expected: dict[str, dict[str, int]] = {}
    for r in rows:
        wait = r["spot_head_wait_s"]
        if wait and float(wait) > 3600 and float(r["idle_gpus"]) >= 0.2 * float(r["capacity"]):
            pool = expected.setdefault(r["pool"], {})
            pool[r["spot_head_held_by"]] = pool.get(r["spot_head_held_by"], 0) + 1
    assert summary["pool_hours_by_reason"] == expected
