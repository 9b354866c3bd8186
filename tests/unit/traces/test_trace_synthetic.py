"""The synthetic generator: determinism under a seed, frozen config, and calibration checks.

Calibration checks run on a tenth-scale trace (scale 0.1 over a tenth of the real inventory,
~45k jobs, 184 days) with tolerances wide enough for seed noise at that size; the full-scale
comparison with every target is in docs/trace-generator.md.
"""

from __future__ import annotations

import dataclasses
import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gfs.services.cli import build_app
from gfs.services.simulator.demand import hp_demand_series, pool_totals
from gfs.services.simulator.traces.gfs_format import load_gfs_trace, read_nodes
from gfs.services.simulator.traces.synth_config import GeneratorConfig
from gfs.services.simulator.traces.synthetic import GENERATOR_FILE, SynthResult, generate, synthesize
from gfs.services.simulator.traces.trace_stats import compute_stats

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
NODES_FILE = FIXTURES / "nodes_small" / "node_info_df.csv"


@cache
def nodes() -> tuple:
    return read_nodes(NODES_FILE)


@cache
def tenth_scale(seed: int = 0) -> SynthResult:
    return generate(GeneratorConfig(scale=0.1, seed=seed), nodes())


@cache
def stats(seed: int = 0) -> dict[str, float]:
    r = tenth_scale(seed)
    return {row.name: row.generated for row in compute_stats(r.columns, r.nodes, r.horizon_s)}


def arrays(r: SynthResult) -> list[np.ndarray]:
    c = r.columns
    return [c.model, c.org, c.is_spot, c.gpu_request, c.workers, c.cpu_request, c.submit_s, c.duration_s]


def test_same_seed_same_trace() -> None:
    config = GeneratorConfig(days=20, scale=0.1, seed=7)
    a, b = generate(config, nodes()), generate(config, nodes())
    for x, y in zip(arrays(a), arrays(b), strict=True):
        np.testing.assert_array_equal(x, y)


def test_different_seed_different_trace() -> None:
    a = generate(GeneratorConfig(days=20, scale=0.1, seed=1), nodes())
    b = generate(GeneratorConfig(days=20, scale=0.1, seed=2), nodes())
    assert len(a.columns) != len(b.columns) or not np.array_equal(a.columns.submit_s, b.columns.submit_s)


def test_generator_json_freezes_config_and_reproduces(tmp_path: Path) -> None:
    config = GeneratorConfig(days=10, scale=0.05, seed=3)
    meta = synthesize(config, nodes(), tmp_path / "a")
    saved = json.loads((tmp_path / "a" / GENERATOR_FILE).read_text())
    assert saved["config_sha256"] == config.digest() == meta["config_sha256"]
    rebuilt = GeneratorConfig.from_dict(saved["config"])
    assert rebuilt == config and rebuilt.digest() == config.digest()
    synthesize(rebuilt, nodes(), tmp_path / "b")
    for name in ("job_info_df.csv", "node_info_df.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert dataclasses.replace(config, seed=4).digest() != config.digest()


def test_output_is_a_valid_gfs_trace(tmp_path: Path) -> None:
    synthesize(GeneratorConfig(days=10, scale=0.05, seed=0), nodes(), tmp_path)
    trace = load_gfs_trace(tmp_path)  # the loader's validation passes: no orphans, no bad values
    assert trace.jobs and len(trace.nodes) == 437
    assert max(j.submit_s + j.duration_s for j in trace.jobs) <= 10 * 86400


@pytest.mark.parametrize(
    ("name", "target", "tolerance"),
    [
        ("Spot job share", 0.1096, 0.025),
        ("HP multi-worker share", 0.0557, 0.015),
        ("Spot multi-worker share", 0.3153, 0.04),
        ("HP fractional gpu_request share", 0.1160, 0.015),
        ("Spot fractional gpu_request share", 0.0198, 0.01),
        ("Spot duration p50 (s)", 2095.5, 700),
        ("A100-SXM4-80GB: Spot share of jobs", 0.1871, 0.03),
        ("A800-SXM4-80GB: Spot share of jobs", 0.4670, 0.06),
        ("Spot GPU-s share", 0.0243, 0.015),
        ("largest org's share of Spot jobs", 0.754, 0.06),
        ("top-1 org share of jobs", 0.388, 0.05),
        ("Spot jobs on days 0-27", 0.6, 5),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_tenth_scale_calibration(name: str, target: float, tolerance: float) -> None:
    assert stats()[name] == pytest.approx(target, abs=tolerance)


def test_arrival_cycles() -> None:
    s = stats()
    assert s["hour-of-day index, h 16 (peak)"] > 1.2 > 0.85 > s["hour-of-day index, h 4 (trough)"]
    assert s["weekday factor, day mod 7 = 2"] < 0.9 < 1.05 < s["weekday factor, day mod 7 = 5"]
    assert s["jobs per hour, Fano (hours >= 1)"] > 3  # over-dispersed; Poisson would give ~1


def test_job_count_scales_with_scale() -> None:
    # Full scale expects ~413k jobs (409k HP arrivals + 51k Spot, before seed noise); a tenth ~46k.
    assert 35_000 < len(tenth_scale().columns) < 56_000


def test_a10_hp_demand_never_exceeds_the_cap() -> None:
    r = tenth_scale()
    trace = r.to_trace()
    a10_cap = sum(n.gpus for n in r.nodes if n.gpu_model == "A10")
    assert pool_totals(hp_demand_series(trace))["A10"].max() <= 0.9 * a10_cap + 1e-6


def test_without_the_cap_a10_is_over_subscribed() -> None:
    config = GeneratorConfig(scale=0.1, seed=0)
    config = dataclasses.replace(config, a10_cap=dataclasses.replace(config.a10_cap, enabled=False))
    r = generate(config, nodes())
    a10 = r.columns.models.index("A10")
    mask = r.columns.model == a10
    load = (r.columns.gpus[mask] * r.columns.duration_s[mask]).sum() / r.horizon_s / 250
    assert load > 1.0  # real trace: 1.33x


def test_cli_synth_stats_and_demand(tmp_path: Path) -> None:
    runner = CliRunner()
    app = build_app()
    out = tmp_path / "trace"
    args = ["--nodes", str(NODES_FILE), "--days", "5", "--scale", "0.05", "--seed", "1", "--out", str(out)]
    result = runner.invoke(app, ["trace", "synth", *args])
    assert result.exit_code == 0, result.output
    assert (out / GENERATOR_FILE).is_file()
    result = runner.invoke(app, ["trace", "stats", "--trace", str(out), "--markdown"])
    assert result.exit_code == 0, result.output
    assert "| Spot job share |" in result.output
    csv_path = tmp_path / "demand.csv"
    result = runner.invoke(app, ["trace", "demand", "--trace", str(out), "--out", str(csv_path)])
    assert result.exit_code == 0, result.output
    assert csv_path.read_text().startswith("time,tenant,pool,demand_gpus\n2024-03-01T00:00:00Z,")


def test_start_day_cuts_a_short_trace_from_the_profile() -> None:
    # Spot starts on profile day 31: a 10-day trace from day 0 has (almost) none, one from day 120
    # has the late regime's ~400 Spot jobs/day x scale 0.1.
    early = generate(GeneratorConfig(days=10, scale=0.1, seed=0), nodes())
    config = GeneratorConfig(days=10, scale=0.1, seed=0)
    late_config = dataclasses.replace(
        config, arrivals=dataclasses.replace(config.arrivals, profile_start_day=120)
    )
    late = generate(late_config, nodes())
    assert early.columns.is_spot.sum() <= 5
    assert 150 < late.columns.is_spot.sum() < 900
