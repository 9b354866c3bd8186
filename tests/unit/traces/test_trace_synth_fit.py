"""The generator's fitting steps: IPF marginals, gang-size tilt, per-model gang model, Gini."""

from __future__ import annotations

import numpy as np
import pytest

from gfs.services.simulator.traces import synth_fit
from gfs.services.simulator.traces.synth_config import GeneratorConfig
from gfs.services.simulator.traces.trace_stats import gini


def test_ipf_matches_both_marginals_and_keeps_zeros() -> None:
    prior = np.array([[1.0, 1.0, 0.0], [1.0, 2.0, 1.0]])
    rows, cols = np.array([10.0, 20.0]), np.array([12.0, 13.0, 5.0])
    table = synth_fit.ipf(prior, rows, cols)
    np.testing.assert_allclose(table.sum(axis=1), rows, rtol=1e-6)
    np.testing.assert_allclose(table.sum(axis=0), cols, rtol=1e-6)
    assert table[0, 2] == 0.0


@pytest.mark.parametrize(("mean", "top"), [(7.89, 182), (11.11, 332), (3.0, 64)])
def test_multi_worker_pmf_hits_mean_and_support(mean: float, top: int) -> None:
    pmf = synth_fit.multi_worker_pmf(mean, top)
    assert pmf[:2].sum() == 0.0 and pmf.size == top + 1
    assert pmf.sum() == pytest.approx(1.0)
    assert float(pmf @ np.arange(top + 1)) == pytest.approx(mean, rel=1e-3)


def test_gpu_request_pmf_respects_a10_and_type_totals() -> None:
    sizes = GeneratorConfig().sizes
    values = np.asarray(sizes.gpu_values)
    hp = synth_fit.gpu_request_pmf(sizes, "HP")
    assert hp[0][values > 1].sum() == 0.0  # A10 nodes have 1 GPU
    assert hp[1:, values < 1].sum() == 0.0  # HP fractions only on A10
    jobs = np.asarray(sizes.hp_jobs_by_model, dtype=float)
    np.testing.assert_allclose(jobs @ hp, sizes.hp_gpu_counts, rtol=1e-3, atol=1.0)


def test_gang_model_meets_per_model_demand_and_type_shares() -> None:
    sizes = GeneratorConfig().sizes
    values = np.asarray(sizes.gpu_values)
    gpu_means = {t: synth_fit.gpu_request_pmf(sizes, t) @ values for t in synth_fit.TYPES}
    gangs = synth_fit.gang_model(sizes, gpu_means)
    jobs = {
        "HP": np.asarray(sizes.hp_jobs_by_model, float),
        "SPOT": np.asarray(sizes.spot_jobs_by_model, float),
    }
    demand = sum(
        jobs[t] * gpu_means[t] * (1 + gangs.share[t] * (gangs.mean_size[t] - 1)) for t in synth_fit.TYPES
    ) / sum(jobs.values())
    np.testing.assert_allclose(demand, sizes.mean_demand_by_model, rtol=1e-3)
    hp_share = (gangs.share["HP"] * jobs["HP"]).sum() / jobs["HP"].sum()
    assert hp_share == pytest.approx(sizes.hp_multi_share, rel=1e-3)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([1, 1, 1, 1], 0.0),  # equal shares
        ([0, 0, 0, 1], 0.75),  # (n + 1 - 2 * sum(cum / total)) / n = (5 - 2 * 1) / 4
        ([1, 3], 0.25),  # cum/total = 0.25, 1.0 -> (3 - 2 * 1.25) / 2
    ],
)
def test_gini_hand_worked(values: list[float], expected: float) -> None:
    assert gini(np.array(values, dtype=float)) == pytest.approx(expected)


def test_clipped_tail_mean_hand_worked() -> None:
    # D log-uniform on [1, e] (log ratio 1): E[D] = e - 1, E[D^2] = (e^2 - 1) / 2; H = 10:
    # E[min(D, H - S)] = E[D] - E[D^2] / (2 H) = (e - 1) - (e^2 - 1) / 40
    e = np.e
    assert synth_fit.clipped_tail_mean(1.0, e, 10.0) == pytest.approx((e - 1) - (e**2 - 1) / 40)
