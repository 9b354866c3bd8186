"""`--window-end-s`: the evaluation window can end after the trace horizon, so quota and preemption
stay on while queued and evicted work finishes (by default everything after the horizon is a
drain without them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import a_job, a_node, a_trace
from typer.testing import CliRunner

from gfs.services.cli import build_app
from gfs.services.core.ids import TaskId
from gfs.services.core.policies.registry import build_policy
from gfs.services.simulator.result import build_policy_result
from gfs.services.simulator.runner import RunSettings, build_simulation, prepare
from gfs.services.simulator.traces.gfs_format import write_gfs_trace
from gfs.services.simulator.workload import build_workload

# One node of 8 GPUs, fifo (reactive quota = capacity, first-node victims). Horizon 2000.
# s0 and s1 (spot, 4 GPUs, 2000 s each) start at 0, s0 on GPUs 0-3 (placed first).
# hA (HP, 4 GPUs, submit 1000, 1000 s) evicts s0 (the first victim in placement order) and runs
# 1040 s (restart overhead) -> 2040; s0 keeps 2000 - 1000 + 1000 (since its last checkpoint, none
# yet) + 40 = 2040 s of work and waits (no GPU free).
# hB (HP, 8 GPUs, submit 1500, 500 s) cannot fit, nor preempt (only s1's 4 GPUs are preemptible).
# At 2000 s1 finishes: hB still cannot preempt (hA's 4 GPUs are HP), s0 restarts on the 4 free GPUs.
# At 2040 hA finishes: 4 free + s0's 4.
# - Window ends at the horizon (2000): preemption is off at 2040; hB waits for s0's end at
#   2000 + 2040 = 4040 and runs 4040 -> 4540. One eviction.
# - Window ends at 10000: hB evicts s0 again at 2040 (it ran 40 s: keeps 2040 - 40 + 40 + 40 = 2080)
#   and runs 540 s -> 2580; s0 restarts at 2580 -> 4660. Two evictions; the simulation stops at the
#   window end 10000 (nothing outstanding, no drain).
TRACE = a_trace(
    [a_node("n0", gpus=8)],
    [
        a_job("s0", cls="SPOT", gpus=4, submit=0, duration=2000),
        a_job("s1", cls="SPOT", gpus=4, submit=0, duration=2000),
        a_job("hA", gpus=4, submit=1000, duration=1000),
        a_job("hB", gpus=8, submit=1500, duration=500),
    ],
)


def run(settings: RunSettings) -> tuple[dict[str, tuple[float, float]], dict[str, float], float]:
    workload, demand = prepare(TRACE, settings)
    sim = build_simulation(workload, demand, build_policy("fifo"), settings)
    sim.run()
    ends = {str(t): (life.first_start, life.end) for t, life in sim.lives.items()}
    return ends, build_policy_result(sim).metrics, sim.stop_s


def test_default_window_ends_at_the_horizon_and_the_rest_is_a_drain() -> None:
    ends, metrics, _ = run(RunSettings())
    assert ends["hA"] == (1000.0, 2040.0)
    assert ends["hB"] == (4040.0, 4540.0)
    assert ends["s0"] == (0.0, 4040.0)
    assert ends["s1"] == (0.0, 2000.0)
    assert metrics["evictions"] == 1.0
    assert metrics["window_end_s"] == 2000.0


def test_a_later_window_end_keeps_preemption_on_until_then() -> None:
    ends, metrics, stop = run(RunSettings(window_end_s=10000.0))
    assert ends["hB"] == (2040.0, 2580.0)
    assert ends["s0"] == (0.0, 4660.0)
    assert ends["s1"] == (0.0, 2000.0)
    assert metrics["evictions"] == 2.0
    assert (metrics["window_start_s"], metrics["window_end_s"]) == (0.0, 10000.0)
    assert stop == 10000.0


def test_window_end_and_days_set_the_window() -> None:
    w = build_workload(TRACE, window_days=1.0, window_end_s=90000.0)
    assert (w.window_start_s, w.window_end_s) == (3600.0, 90000.0)
    assert [t.task_id for t in w.tasks] == [TaskId("hA"), TaskId("hB")]  # spot before 3600 dropped
    assert w.dropped_spot == 2
    with pytest.raises(ValueError, match="window end"):
        build_workload(TRACE, window_end_s=0.0)


def test_simulate_cli_window_end_s(tmp_path: Path) -> None:
    write_gfs_trace(TRACE, tmp_path / "trace")
    out = tmp_path / "out.json"
    args = ["simulate", "--trace", str(tmp_path / "trace"), "--policy", "fifo", "--json", str(out)]
    result = CliRunner().invoke(build_app(), [*args, "--window-end-s", "10000"])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["settings"]["window_end_s"] == 10000.0
    assert data["policies"]["fifo"]["evictions"] == 2.0
    bad = CliRunner().invoke(build_app(), [*args, "--window-end-s", "-5"])
    assert bad.exit_code != 0
