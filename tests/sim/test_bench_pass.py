"""`gfs bench pass` (issue 23 item 4): the scenario it times and the command's report.

The scenario: 432 nodes x 8 GPUs = 3,456 GPUs filled to at least 80% (2,764.8 GPUs) by running
tasks before the backlog arrives. The command runs both paths (scanning, indexed) on the same
seeded scenario, prints a row per path and size, and says the decisions were the same."""

from __future__ import annotations

from typer.testing import CliRunner

from gfs.services.cli import build_app
from gfs.services.simulator.pass_bench import build


def test_the_scenario_is_the_largest_pool_at_80_percent_with_the_backlog_queued() -> None:
    rt, _, _, _ = build(200, seed=1)
    assert rt.state.capacity == 3456
    assert rt.state.allocated_gpus() >= 0.8 * 3456
    assert len(rt.hp) + len(rt.spot) == 200  # the backlog, nothing else, waits


def test_bench_pass_prints_both_paths_and_checks_they_agree() -> None:
    args = ["bench", "pass", "--queued", "30", "--passes", "5", "--sim-queued", "40"]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    rows = [
        line.split()
        for line in result.output.splitlines()
        if line.split()[1:2] in (["scanning"], ["indexed"])
    ]
    assert [row[1] for row in rows] == ["scanning", "indexed"]
    assert rows[0][-1] == rows[1][-1]  # the same number of decisions on both paths
    sims = [line for line in result.output.splitlines() if line.startswith("simulation")]
    assert len(sims) == 2 and "scanning" in sims[0] and "indexed" in sims[1]
    assert result.output.rstrip().endswith("decisions identical on both paths")
