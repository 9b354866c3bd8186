"""The sim/live parity trace (tests/data/parity): the committed files are the seeded generator's
output, and the simulator's decision log on it has what the parity test needs (README.md there)."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from typer.testing import CliRunner

from gfs.services.cli import build_app
from gfs.services.simulator.traces.gfs_format import load_gfs_trace

PARITY = Path(__file__).resolve().parents[1] / "data" / "parity"
WINDOW_END_S = 10800.0
COMMAND = [
    "simulate", "--trace", str(PARITY), "--policy", "gfs", "--forecast", "persistence",
    "--window-days", "30", "--window-end-s", "10800",
]  # fmt: skip


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("parity_make_trace", PARITY / "make_trace.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_files_are_the_generators_output(tmp_path: Path) -> None:
    generator().write(tmp_path)
    for name in ("node_info_df.csv", "job_info_df.csv"):
        assert (tmp_path / name).read_bytes() == (PARITY / name).read_bytes(), name


def test_trace_shape() -> None:
    trace = load_gfs_trace(PARITY)
    pools = Counter(n.gpu_model for n in trace.nodes)
    assert len(trace.nodes) <= 8 and len(pools) == 2
    assert sorted(n.name for n in trace.nodes) == [f"n{i}" for i in range(8)]
    assert 30 <= len(trace.jobs) <= 60
    for pool in pools:  # HP tasks in every pool from t = 0
        assert any(j.gpu_model == pool and j.job_class == "HP" and j.submit_s == 0 for j in trace.jobs)
    assert any(j.workers >= 2 for j in trace.jobs)
    assert {0.5, 0.25} <= {j.gpus_per_worker for j in trace.jobs}
    assert any(j.gpus_per_worker >= 1 for j in trace.jobs)
    spot = [j for j in trace.jobs if j.job_class == "SPOT"]
    assert spot and all(j.checkpoint_interval_s != 3600.0 for j in spot)
    assert sum(j.cancel_s is not None for j in trace.jobs) >= 2
    for j in trace.jobs:
        times = [j.submit_s, j.duration_s, j.checkpoint_interval_s] + ([j.cancel_s] if j.cancel_s else [])
        assert all(t % 20 == 0 for t in times), j
    assert trace.horizon_s <= 3 * 3600


@pytest.fixture(scope="module")
def decisions(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    out = tmp_path_factory.mktemp("parity")
    args = [*COMMAND, "--decisions", str(out / "d.jsonl"), "--json", str(out / "m.json")]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in (out / "d.jsonl").read_text().splitlines()]
    return lines, json.loads((out / "m.json").read_text())["policies"]["gfs"]


def test_decision_log_has_what_the_parity_test_needs(
    decisions: tuple[list[dict[str, Any]], dict[str, Any]],
) -> None:
    lines, metrics = decisions
    actions = Counter(r["action"] for r in lines)
    assert actions["evict"] >= 10
    cancels = {r["task"]: r["node"] for r in lines if r["action"] == "cancel"}
    assert cancels == {"sp-a-cancel": "n1", "sp-b-gang": None, "hp-b-base": "n5"}
    trace = load_gfs_trace(PARITY)
    spot = {j.name for j in trace.jobs if j.job_class == "SPOT"}
    started = {r["task"] for r in lines if r["action"] == "start"}
    assert spot - started == {"sp-b-gang"}  # the quota lets spot run; the gang is cancelled queued
    assert all(r["t"] % 20 == 0 for r in lines)
    for r in lines:  # GPU indices in every placement
        for p in r.get("placements", []):
            assert "gpus" in p or ("gpu" in p and "fraction" in p)
    assert any("fraction" in p for r in lines for p in r.get("placements", []))
    assert metrics["tasks_unfinished"] == 0 and metrics["tasks_cancelled"] == 3
    assert metrics["tasks_finished"] + metrics["tasks_cancelled"] == len(trace.jobs)
    assert metrics["window_start_s"] == 0 and metrics["window_end_s"] == WINDOW_END_S
    assert max(r["t"] for r in lines) <= 3 * 3600


def test_cancel_lines_come_before_the_pass_of_their_instant(
    decisions: tuple[list[dict[str, Any]], dict[str, Any]],
) -> None:
    lines, _ = decisions
    for i, r in enumerate(lines):
        if r["action"] == "cancel":
            before = [q for q in lines[:i] if q["t"] == r["t"] and q["pool"] == r["pool"]]
            assert all(q["action"] == "cancel" for q in before)
