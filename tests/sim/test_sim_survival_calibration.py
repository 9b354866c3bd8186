"""The survival quote's calibration harness (issue 27 item 1): outcomes, the isotonic fit and the
reliability bins against hand-worked values; quoting changes no decision of the simulation; the
CLI runs end to end on a tiny config and fits on the training runs only."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from gfs.services.core.policies.registry import build_policy
from gfs.services.core.survival import QuoteCalibration
from gfs.services.simulator.calibration import (
    QuotingSimulation,
    first_run_outcome,
    load_plan,
    main,
    run_quoting,
)
from gfs.services.simulator.calibration_scoring import (
    Quoted,
    brier,
    fit,
    guarantee_pairs,
    isotonic,
    reliability,
    target_gaps,
    wilson_interval,
)
from gfs.services.simulator.evaluate import MAX_JOB_SHARE
from gfs.services.simulator.evaluate_config import resolve_nodes
from gfs.services.simulator.evaluate_trace import regime_trace
from gfs.services.simulator.runner import ForecastSource, RunSettings, build_simulation, prepare
from gfs.services.simulator.traces.gfs_format import read_nodes

ROOT = Path(__file__).resolve().parents[2]
NODES = ROOT / "tests" / "fixtures" / "nodes_small" / "node_info_df.csv"
NAN = math.nan
W = 100_000.0  # the window's end in the outcome tests


def test_first_run_outcomes() -> None:
    def out(**kw: float) -> bool | None:
        args = {"start": 1000.0, "evicted_after": NAN, "finished": NAN, "cancelled": NAN, "window_end": W}
        return first_run_outcome(3600.0, **{**args, **kw})

    assert out(start=NAN) is None  # never started
    assert out(evicted_after=1800.0) is False  # evicted half an hour into its first hour
    assert out(evicted_after=3600.0) is True  # evicted only once the hour was done
    assert out(finished=2000.0) is True  # finished within the hour, never evicted
    assert out(cancelled=1100.0) is None  # withdrawn by its owner first: not known
    assert out(cancelled=1100.0, finished=1050.0) is True  # finished before the cancel came
    assert out() is True  # still running, its hour (1000 .. 4600) ended inside the window
    assert out(start=W - 1000.0) is None  # its hour reaches past the window: not known


def test_isotonic_pools_adjacent_violators() -> None:
    # y by x: 0.1 F, 0.2 T, 0.3 F, 0.4 T, 0.5 T. 0.2/0.3 violate and merge into a block of rate
    # 0.5; 0.4 and 0.5 tie at 1 and merge. Knots at each block's ends.
    r = isotonic([(0.3, False), (0.1, False), (0.5, True), (0.2, True), (0.4, True)])
    assert r.x == pytest.approx((0.1, 0.2, 0.3, 0.4, 0.5))
    assert r.y == pytest.approx((0.0, 0.5, 0.5, 1.0, 1.0))
    assert r(0.25) == pytest.approx(0.5)  # inside a block: the block's rate
    assert r(0.35) == pytest.approx(0.75)  # between blocks: linear
    # Equal raw values are one group, whatever their order: 0.9 with 1 of 2 survived (0.5), above
    # 0.5 with none (0). Split by outcome, 0.9 would get two knots, 0 and 1.
    tied = isotonic([(0.9, True), (0.9, False), (0.5, False)])
    assert tied.x == pytest.approx((0.5, 0.9)) and tied.y == pytest.approx((0.0, 0.5))


def test_reliability_bins_and_the_targets() -> None:
    pairs = [(0.8, True), (0.82, False), (0.9, True), (0.95, True), (1.0, True)]
    bins = {(b.lo, b.hi): b for b in reliability(pairs) if b.count}
    assert sorted(bins) == [(0.75, 0.85), (0.875, 0.925), (0.925, 0.975), (0.975, 1.0)]
    b = bins[(0.75, 0.85)]
    assert (b.count, b.mean_quote, b.observed) == (2, pytest.approx(0.81), 0.5)
    assert bins[(0.975, 1.0)].count == 1  # 1.0 belongs to the last bin
    gaps = target_gaps(pairs)
    assert gaps["0.8"]["within_3pt"] is False  # 0.5 observed against 0.8
    assert gaps["0.9"]["within_3pt"] is False  # 1 of 1 survived: 1.0 against 0.9
    assert gaps["0.95"]["observed"] == 1.0


def _tiny_config(tmp_path: Path) -> Path:
    data = yaml.safe_load((ROOT / "configs" / "calibration-survival.yaml").read_text())
    data.update(
        nodes=str(NODES), node_fraction=0.1, generator={"days": 12}, window_days=3, drain_days=0.5, workers=1
    )
    data["regimes"] = [r for r in data["regimes"] if r["name"] in ("synth", "mmpp-medium")]
    # The synthetic generator's spot starts late in its trace: on 12 days only MMPP has spot work.
    data["calibration"] = {"train": {"mmpp-medium": [101]}, "held_out": {"mmpp-medium": [201]}}
    path = tmp_path / "calibration.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_quoting_changes_no_decision(tmp_path: Path) -> None:
    cfg, _ = load_plan(_tiny_config(tmp_path))
    ct = regime_trace(
        cfg.regime("mmpp-medium"), read_nodes(resolve_nodes(cfg.nodes)), seed=101, max_job_share=MAX_JOB_SHARE
    )
    settings = RunSettings(forecast=ForecastSource.PERSISTENCE, seed=101, window_days=3, drain_days=0.5)
    workload, demand = prepare(ct.trace, settings)

    def lives(sim: object) -> list[tuple[object, ...]]:
        return sorted(
            (tid, life.first_start, life.start, life.end, life.evictions, life.succeeded, life.failed)
            for tid, life in sim.lives.items()  # type: ignore[attr-defined]
        )

    plain = build_simulation(workload, demand, build_policy("gfs"), settings)
    plain.run()
    other = build_simulation(workload, demand, build_policy("gfs"), settings)
    quoting = QuotingSimulation(other.w, other.policy, other.forecaster, other.demand, other.settings)
    quoting.run()
    assert quoting.watched, "no spot task was quoted: the test shows nothing"
    assert lives(quoting) == lives(plain)


def test_the_cli_fits_on_training_runs_and_scores_the_held_out(tmp_path: Path) -> None:
    config = _tiny_config(tmp_path)
    assert main([str(config), "--out", str(tmp_path / "out")]) == 0
    data = json.loads((tmp_path / "out" / "calibration.json").read_text())
    assert set(data["held_out"]) == {"all held-out", "mmpp-medium (all seeds)", "mmpp-medium seed 201"}
    assert set(data["knots"]) <= {"1", "2", "4"}  # one map per quoted duration with outcomes
    for knots in data["knots"].values():
        assert knots["x"] == sorted(knots["x"])
    text = (tmp_path / "out" / "calibration.txt").read_text()
    assert "at 0.9 (quoted 0.875-0.925)" in text
    # The quotes are kept: rescoring them without simulating gives the same report.
    assert (
        main(
            [str(config), "--records", str(tmp_path / "out" / "records.json"), "--out", str(tmp_path / "re")]
        )
        == 0
    )
    assert (tmp_path / "re" / "calibration.txt").read_text() == text


def test_a_run_both_trained_on_and_held_out_is_refused(tmp_path: Path) -> None:
    path = _tiny_config(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["calibration"]["held_out"]["mmpp-medium"] = [101, 201]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match="both trained on and held out"):
        load_plan(path)


def test_wilson_interval_by_hand() -> None:
    # 9 of 10, z = 1.96: centre (0.9 + 0.19208) / 1.38416 = 0.78898, half-width
    # 1.96 / 1.38416 x sqrt(0.009 + 0.009604) = 0.19314.
    low, high = wilson_interval(9, 10)
    assert (low, high) == (pytest.approx(0.59584, abs=1e-5), pytest.approx(0.98212, abs=1e-5))
    # 20 of 20: not the empty interval [1, 1] of the normal approximation; 1.96 / 1.19208 x
    # sqrt(3.8416 / 1600) = 0.080565 around 1.09604 / 1.19208 = 0.919434.
    assert wilson_interval(20, 20) == (pytest.approx(0.838869, abs=1e-5), 1.0)
    assert all(math.isnan(v) for v in wilson_interval(0, 0))


def test_targets_carry_the_interval_and_whether_it_reaches_the_range() -> None:
    # 9 of 10 quoted 0.9 survived: observed 0.9, within 3 points.
    at_09 = target_gaps([(0.9, True)] * 9 + [(0.9, False)])["0.9"]
    assert at_09["within_3pt"] is True and at_09["ci95"] == [
        pytest.approx(0.59584, abs=1e-5),
        pytest.approx(0.98212, abs=1e-5),
    ]
    # 20 of 20 quoted 0.8: observed 1.0 misses 0.77-0.83, and the interval [0.839, 1] does not
    # reach it either; 5 of 5 (interval [0.566, 1]) cannot tell.
    assert target_gaps([(0.8, True)] * 20)["0.8"]["interval_reaches"] is False
    assert target_gaps([(0.8, True)] * 5)["0.8"]["interval_reaches"] is True


def test_fit_is_one_isotonic_map_per_duration() -> None:
    # The same raw 0.9 survives 1 h always and 4 h half the time: one map per duration keeps the
    # two apart (a single map would give 0.75 for both).
    records = [
        Quoted("A", 1, {1: 0.9, 4: 0.9}, {1: True, 4: True}),
        Quoted("A", 1, {1: 0.9, 4: 0.9}, {1: True, 4: False}),
    ]
    c = fit(records)
    assert [h for h, _ in c.by_hours] == [1, 4]
    assert c(1, 0.9) == 1.0 and c(4, 0.9) == 0.5
    # The scored quote is what the live service sends: mapped, then rounded to 3 decimals.
    assert guarantee_pairs([Quoted("A", 1, {1: 0.12345}, {1: True})], QuoteCalibration()) == [(0.123, True)]


def test_a_regimes_quota_settings_reach_the_policy(tmp_path: Path) -> None:
    # With p = 0.7 for the regime, a task the quota holds back is quoted 0.7 (its promise), not
    # the default 0.9: the settings reached the simulated GFS.
    path = _tiny_config(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["calibration"]["quota"] = {"mmpp-medium": {"guarantee_rate": 0.7}}
    path.write_text(yaml.safe_dump(data))
    cfg, plan = load_plan(path)
    assert plan["quota"]["mmpp-medium"].guarantee_rate == 0.7
    quotes = {
        p for r in run_quoting(cfg, "mmpp-medium", 101, plan["quota"]["mmpp-medium"]) for p in r.raw.values()
    }
    assert 0.7 in quotes and 0.9 not in quotes
    data["calibration"]["quota"] = {"no-such-regime": {"guarantee_rate": 0.7}}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(KeyError, match="no-such-regime"):
        load_plan(path)


def test_brier_score_by_hand() -> None:
    # (0.9 - 1)^2 = 0.01 and (0.9 - 0)^2 = 0.81: mean 0.41.
    assert brier([(0.9, True), (0.9, False)]) == pytest.approx(0.41)
    assert math.isnan(brier([]))
