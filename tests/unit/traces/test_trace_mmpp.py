"""The MMPP generator: determinism, the GFS format round trip, the load knob, the gang knob.

Runs on the small fixture inventory (437 nodes, ~1,000 GPUs, six pools) with short traces, so the
whole module takes a few seconds.
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
from gfs.services.simulator.traces.columns import JobColumns
from gfs.services.simulator.traces.gfs_format import load_gfs_trace, read_nodes
from gfs.services.simulator.traces.mmpp import (
    GENERATOR_FILE,
    MmppResult,
    generate_mmpp,
    offered_load,
    spot_weights,
    synthesize_mmpp,
)
from gfs.services.simulator.traces.mmpp_arrivals import modulator_levels, stationary
from gfs.services.simulator.traces.mmpp_config import MmppConfig
from gfs.services.simulator.traces.mmpp_marks import Pool, duration_quantile, gpu_request_pmf
from gfs.services.simulator.traces.records import TraceNode
from gfs.services.simulator.workload import build_workload

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
NODES_FILE = FIXTURES / "nodes_small" / "node_info_df.csv"
DAY_S = 86400.0
# Short traces keep the tests fast; the burn-in still covers most durations.
BASE = MmppConfig(days=20.0, burn_in_days=30.0, spot_start_day=10.0, seed=3)


@cache
def nodes() -> tuple[TraceNode, ...]:
    return read_nodes(NODES_FILE)


@cache
def generated(config: MmppConfig) -> MmppResult:
    return generate_mmpp(config, nodes())


def arrays(r: MmppResult) -> list[np.ndarray]:
    c = r.columns
    return [c.model, c.org, c.is_spot, c.gpu_request, c.workers, c.cpu_request, c.submit_s, c.duration_s]


def test_same_seed_same_trace_and_different_seed_differs() -> None:
    a, b = generate_mmpp(BASE, nodes()), generate_mmpp(BASE, nodes())
    for x, y in zip(arrays(a), arrays(b), strict=True):
        np.testing.assert_array_equal(x, y)
    other = generated(dataclasses.replace(BASE, seed=4))
    assert len(other.columns) != len(a.columns) or not np.array_equal(
        other.columns.submit_s, a.columns.submit_s
    )


def test_a_pool_s_hp_jobs_do_not_depend_on_the_other_pools() -> None:
    # Streams are keyed by (seed, type, pool), so a pool subset is the same HP trace restricted
    # (spot is not: the cluster-wide spot load is spread over the pools present).
    h800 = tuple(n for n in nodes() if n.gpu_model == "H800")
    alone = generate_mmpp(BASE, h800).columns
    full = generated(BASE).columns
    alone = alone.take(np.flatnonzero(~alone.is_spot))
    mine = full.take(np.flatnonzero((full.model == full.models.index("H800")) & ~full.is_spot))
    np.testing.assert_array_equal(alone.submit_s, mine.submit_s)
    np.testing.assert_array_equal(alone.workers, mine.workers)
    np.testing.assert_array_equal(alone.duration_s, mine.duration_s)


def test_written_trace_loads_and_every_job_can_run(tmp_path: Path) -> None:
    meta = synthesize_mmpp(BASE, nodes(), tmp_path)
    assert meta["config_sha256"] == BASE.digest()
    assert json.loads((tmp_path / GENERATOR_FILE).read_text())["jobs"] == meta["jobs"]
    trace = load_gfs_trace(tmp_path)  # the simulator's own reader, with its validation
    assert len(trace.jobs) == meta["jobs"] > 0
    assert {j.job_class for j in trace.jobs} == {"HP", "SPOT"}
    assert trace.horizon_s == pytest.approx(BASE.days * DAY_S)
    assert min(j.submit_s for j in trace.jobs) == 0.0 and meta["jobs_at_t0"] > 0  # stationary start
    assert min(j.submit_s for j in trace.jobs if j.job_class == "SPOT") >= BASE.spot_start_day * DAY_S
    workload = build_workload(trace, window_days=BASE.days - BASE.spot_start_day, drain_days=1.0)
    assert workload.rejected_infeasible == 0  # gangs capped to what each pool can hold
    assert workload.dropped_spot == 0


@pytest.mark.parametrize("load", [0.5, 1.05])
def test_realised_hp_load_matches_the_target(load: float) -> None:
    config = dataclasses.replace(BASE, hp_load=load)
    result = generated(config)
    cols = result.columns
    horizon = config.days * DAY_S
    # Cluster-wide, recomputed from the final jobs (clipped, whole seconds): within 3 %.
    assert offered_load(cols, nodes(), 0.0, horizon)["HP"] == pytest.approx(load, rel=0.03)
    # Per pool: the generator's own figure within one job's worth; on the pools with >= 100 GPUs
    # the recomputed load is within 10 % (a single long 8-GPU job is 0.05 of a 160-GPU pool).
    for pool, value in result.loads["HP"].items():
        assert value == pytest.approx(load, rel=0.25), pool
        pool_nodes = tuple(n for n in nodes() if n.gpu_model == pool)
        if sum(n.gpus for n in pool_nodes) >= 100:
            mine = cols.take(np.flatnonzero(cols.model == cols.models.index(pool)))
            assert offered_load(mine, pool_nodes, 0.0, horizon)["HP"] == pytest.approx(load, rel=0.1), pool


def test_load_can_be_met_over_a_later_span() -> None:
    config = dataclasses.replace(BASE, hp_load=0.8, load_start_day=10.0)
    cols = generated(config).columns
    assert offered_load(cols, nodes(), 10 * DAY_S, config.days * DAY_S)["HP"] == pytest.approx(0.8, rel=0.03)
    # The span before is thinned alike (not emptied): the same process at the same rate.
    assert offered_load(cols, nodes(), 0.0, 10 * DAY_S)["HP"] > 0.3


def test_spot_load_matches_its_target() -> None:
    config = dataclasses.replace(BASE, spot_load=0.1)
    cols = generated(config).columns
    got = offered_load(cols, nodes(), config.spot_start_day * DAY_S, config.days * DAY_S)["SPOT"]
    assert got == pytest.approx(0.1, rel=0.1)


def test_spot_load_is_spread_like_the_published_trace() -> None:
    pools = (Pool("A10", (1,) * 100, 128), Pool("A100-SXM4-80GB", (8,) * 10, 128), Pool("B200", (8,) * 5, 96))
    weights = spot_weights(pools, published=True)
    capacity = {p.name: p.capacity for p in pools}
    assert sum(weights[n] * capacity[n] for n in weights) == pytest.approx(sum(capacity.values()))
    assert weights["A100-SXM4-80GB"] > 3 * weights["A10"]  # Spot barely uses A10
    assert spot_weights(pools, published=False) == dict.fromkeys(capacity, 1.0)


def _wide_share(cols: JobColumns) -> float:
    hp = ~cols.is_spot
    wide = (cols.workers >= 4) & (cols.gpus >= 16)
    return float(wide[hp].mean())


def test_gang_heaviness_raises_the_wide_gang_share() -> None:
    plain = _wide_share(generated(BASE).columns)
    heavy = _wide_share(generated(dataclasses.replace(BASE, wide_gang_share=0.1)).columns)
    assert heavy > 2 * plain
    assert heavy > 0.05


def test_odd_sizes_raise_the_non_power_of_two_share() -> None:
    def odd(cols: JobColumns) -> float:
        g = cols.gpu_request
        return float(((g < 1) | np.isin(g, (3.0, 5.0, 6.0, 7.0))).mean())

    assert (
        odd(generated(dataclasses.replace(BASE, odd_size_share=0.3)).columns)
        > odd(generated(BASE).columns) + 0.1
    )


def test_burstiness_widens_the_hourly_counts() -> None:
    def fano(burstiness: float) -> float:
        cols = generated(dataclasses.replace(BASE, burstiness=burstiness)).columns
        t = cols.submit_s[(cols.submit_s > 0) & ~cols.is_spot]
        hourly = np.bincount((t // 3600).astype(np.int64))[1:]
        return float(hourly.var() / hourly.mean())

    assert fano(0.0) < fano(1.0) < fano(2.0)


def test_modulator_levels_keep_a_stationary_mean_of_one() -> None:
    sojourn, weights = np.array([7.0, 9.0, 5.0, 1.5]), np.array([0.35, 0.4, 0.2, 0.05])
    pi = stationary(sojourn, weights)
    assert pi.sum() == pytest.approx(1.0)
    for b in (0.0, 1.0, 2.5):
        assert pi @ modulator_levels((0.55, 1.0, 1.6, 4.0), sojourn, weights, b) == pytest.approx(1.0)
    # Two states jumping to each other: time shares are the mean sojourns' shares.
    np.testing.assert_allclose(stationary(np.array([5.0, 2.5]), np.array([1.0, 1.0])), [2 / 3, 1 / 3])


def test_sizes_follow_the_pools_nodes_and_medians() -> None:
    a10, h800 = Pool("A10", (1,) * 10, 128), Pool("H800", (8,) * 4, 192)
    values, pmf = gpu_request_pmf("HP", a10)
    assert values.max() == 1.0 and (values < 1).any()  # fractions only on 1-GPU nodes
    values, pmf = gpu_request_pmf("HP", h800)
    assert values.min() >= 1.0
    assert pmf[values < 8].sum() <= 0.5 <= pmf[values <= 8].sum()  # published median 8


def test_durations_keep_the_published_median_per_model() -> None:
    u = (np.arange(10_000) + 0.5) / 10_000
    assert np.median(duration_quantile("HP", "A10", u)) == pytest.approx(0.11 * 3600, rel=0.01)
    assert np.median(duration_quantile("SPOT", "H800", u)) == pytest.approx(0.32 * 3600, rel=0.01)
    assert duration_quantile("HP", "GPU-series-1", u).mean() == pytest.approx(315.42 * 3600, rel=0.02)


def test_config_round_trips_and_rejects_bad_knobs() -> None:
    config = dataclasses.replace(
        BASE,
        wide_gang_share=0.2,
        slow_levels=(0.5, 2.0),
        slow_sojourn_days=(3.0, 1.0),
        slow_jump_weights=(1.0, 1.0),
    )
    again = MmppConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config and again.digest() == config.digest()
    with pytest.raises(ValueError, match="unknown mmpp"):
        MmppConfig.from_dict({"hp_lod": 0.5})
    with pytest.raises(ValueError, match="wide_gang_share"):
        MmppConfig(wide_gang_share=1.5)


def test_cli_writes_a_loadable_trace(tmp_path: Path) -> None:
    out = tmp_path / "trace"
    result = CliRunner().invoke(
        build_app(),
        ["trace", "mmpp", "--nodes", str(NODES_FILE), "--out", str(out), "--days", "12", "--hp-load", "0.6",
         "--spot-start-day", "6", "--node-fraction", "0.5", "--pool", "A100-SXM4-80GB", "--pool", "A10",
         "--seed", "5"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    trace = load_gfs_trace(out)
    assert {n.gpu_model for n in trace.nodes} == {"A100-SXM4-80GB", "A10"}
    assert json.loads((out / GENERATOR_FILE).read_text())["config"]["hp_load"] == 0.6
    bad = CliRunner().invoke(
        build_app(), ["trace", "mmpp", "--nodes", str(NODES_FILE), "--out", str(out), "--pool", "B200"]
    )
    assert bad.exit_code != 0
