"""Turn the generator's published marginals into the conditional tables it samples from.

The statistics give marginals (per type, per model, per org) but few joint tables. Each function
here builds one joint table that agrees with the marginals it is given, by iterative proportional
fitting (IPF) from a prior that encodes what the statistics do say (support, medians), or by a
one-dimensional solve. All are deterministic (no randomness), so the config alone fixes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from gfs.services.simulator.traces.synth_config import DurationConfig, GeneratorConfig, SizeConfig
from gfs.services.simulator.traces.synth_orgs import MODELS, ORG_PROFILE

TYPES = ("HP", "SPOT")
_WHOLE = (1.0, 2.0, 4.0, 8.0)


def ipf(prior: np.ndarray, row_totals: np.ndarray, col_totals: np.ndarray, *, iters: int = 200) -> np.ndarray:
    """Scale `prior` (rows x cols, >= 0) until its row and column sums match the totals."""
    table = prior.astype(np.float64).copy()
    for _ in range(iters):
        rows = table.sum(axis=1)
        table *= np.divide(row_totals, rows, out=np.zeros_like(rows), where=rows > 0)[:, None]
        cols = table.sum(axis=0)
        table *= np.divide(col_totals, cols, out=np.zeros_like(cols), where=cols > 0)[None, :]
    return table


def gpu_request_pmf(sizes: SizeConfig, kind: str) -> np.ndarray:
    """P(gpu_request value | model) for one type: [n_models, n_values], rows sum to 1."""
    values = np.asarray(sizes.gpu_values)
    counts = np.asarray(sizes.hp_gpu_counts if kind == "HP" else sizes.spot_gpu_counts, dtype=float)
    jobs = np.asarray(sizes.hp_jobs_by_model if kind == "HP" else sizes.spot_jobs_by_model, dtype=float)
    prior = np.zeros((len(MODELS), len(values)))
    for m, model in enumerate(MODELS):
        if model == "A10":  # one GPU per node: only values <= 1
            prior[m] = np.where(values <= 1, 1.0, 0.0)
            continue
        for v, value in enumerate(values):
            if value < 1:
                prior[m, v] = 1.0 if (kind == "SPOT" and model in sizes.spot_fraction_models) else 0.0
            elif value in _WHOLE:
                prior[m, v] = sizes.whole_gpu_prior[m][_WHOLE.index(value)]
            else:
                prior[m, v] = sizes.odd_weight
    table = ipf(prior, jobs, counts)
    return np.asarray(table / table.sum(axis=1, keepdims=True))


def _base_multi_pmf(max_workers: int) -> np.ndarray:
    """Shape of worker_num over 2..max among multi-worker jobs (whole-trace pmf, section 4.2)."""
    w = np.zeros(max_workers + 1)
    for k, n in {2: 13142, 3: 4600, 4: 5267, 5: 1689, 6: 1785, 7: 1566, 8: 2486, 16: 872, 32: 755,
                 64: 84}.items():  # fmt: skip
        if k <= max_workers:
            w[k] = n
    for lo, hi, n in ((9, 15, 3331), (17, 31, 2211), (33, 63, 882), (65, 127, 451)):
        hi = min(hi, max_workers)
        if lo <= hi:
            w[lo : hi + 1] += n / (hi - lo + 1)
    if max_workers >= 128:  # 128-332: a spike at 128 and a thin spread above it
        w[128] += 0.6 * 162
        w[129 : max_workers + 1] += 0.4 * 162 / (max_workers - 128)
    return np.asarray(w / w.sum())


def multi_worker_pmf(mean: float, max_workers: int) -> np.ndarray:
    """P(workers = k | multi-worker), k = 0..max: the base shape tilted by k**a to hit `mean`."""
    base = _base_multi_pmf(max_workers)
    k = np.arange(max_workers + 1, dtype=float)
    k[0] = 1.0  # weight 0 there anyway; avoids 0**a

    def tilted(a: float) -> np.ndarray:
        p = base * k**a
        return np.asarray(p / p.sum())

    lo, hi = -3.0, 3.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if float((tilted(mid) * np.arange(max_workers + 1)).sum()) < mean:
            lo = mid
        else:
            hi = mid
    return tilted((lo + hi) / 2)


@dataclass(frozen=True, slots=True)
class GangModel:
    """P(multi-worker | type, model) and the mean size of multi-worker gangs per type and model."""

    share: dict[str, np.ndarray]
    mean_size: dict[str, np.ndarray]


def gang_model(sizes: SizeConfig, gpu_means: dict[str, np.ndarray]) -> GangModel:
    """Multi-worker share and gang size per (type, model) so each model's mean demand per job holds.

    p[t, m] = min(0.95, c_t * k_m): the model tilt k_m comes from the model's mean demand and c_t keeps
    each type's multi-worker share (iterated to a fixed point). Where the share hits its ceiling and
    the model is still short (H800: 65 GPUs per job), that model's gangs grow instead (factor on
    mean size - 1). This lifts the type-level mean gang size above the published one; the three
    marginals (type share, type mean size, model mean demand) cannot all hold with model-independent
    gang shapes, and the per-model load matters more to the scheduler than the gang-size mean.
    """
    jobs = {
        "HP": np.asarray(sizes.hp_jobs_by_model, dtype=float),
        "SPOT": np.asarray(sizes.spot_jobs_by_model, dtype=float),
    }
    share = {"HP": sizes.hp_multi_share, "SPOT": sizes.spot_multi_share}
    extra = {"HP": sizes.hp_multi_mean - 1.0, "SPOT": sizes.spot_multi_mean - 1.0}
    target = np.asarray(sizes.mean_demand_by_model)
    n = sum(jobs[t] for t in TYPES)
    base = sum(jobs[t] * gpu_means[t] for t in TYPES)
    c = dict(share)
    k = np.ones(len(MODELS))
    for _ in range(100):
        # mean demand of model m = sum_t n_t g_t (1 + p_tm extra_t) / sum_t n_t: linear in k_m
        slope = sum(jobs[t] * gpu_means[t] * c[t] * extra[t] for t in TYPES)
        k = np.where(slope > 0, np.maximum(0.0, (target * n - base) / np.maximum(slope, 1e-12)), 0.0)
        for t in TYPES:
            p = np.minimum(0.95, c[t] * k)
            c[t] *= share[t] * jobs[t].sum() / max(float((p * jobs[t]).sum()), 1e-12)
    p_final = {t: np.minimum(0.95, c[t] * k) for t in TYPES}
    achieved = sum(jobs[t] * gpu_means[t] * p_final[t] * extra[t] for t in TYPES)
    boost = np.clip((target * n - base) / np.maximum(achieved, 1e-12), 1.0, 10.0)
    return GangModel(share=p_final, mean_size={t: 1.0 + extra[t] * boost for t in TYPES})


def org_tables(config: GeneratorConfig) -> dict[str, np.ndarray]:
    """P(org | type, model): [n_models, n_orgs] per type, by IPF over the org profile.

    Prior: org jobs of that type x the org's model shares (GPU-second shares, the only org x model
    table published). Fitted to jobs per (model, type) and jobs per (org, type).
    """
    sizes = config.sizes
    n_orgs = len(ORG_PROFILE)
    jobs = np.array([row[1] for row in ORG_PROFILE], dtype=float)
    known_spot = np.array([row[2] if row[2] is not None else -1 for row in ORG_PROFILE], dtype=float)
    shares = np.array([row[3] for row in ORG_PROFILE], dtype=float)
    # Orgs without a published split share the rest of the Spot jobs in proportion to their size.
    unknown = known_spot < 0
    rest = sum(sizes.spot_jobs_by_model) - known_spot[~unknown].sum()
    spot = np.where(unknown, jobs * rest / jobs[unknown].sum(), known_spot)
    by_type = {"HP": jobs - spot, "SPOT": spot}
    model_totals = {
        "HP": np.asarray(sizes.hp_jobs_by_model, dtype=float),
        "SPOT": np.asarray(sizes.spot_jobs_by_model, dtype=float),
    }
    tables: dict[str, np.ndarray] = {}
    for t in TYPES:
        # A tiny floor on the org's own models keeps IPF feasible where shares were rounded to 0.
        prior = by_type[t][:, None] * (shares + 1e-4 * (shares.sum(axis=1, keepdims=True) > 0))
        fitted = ipf(prior, by_type[t] * model_totals[t].sum() / by_type[t].sum(), model_totals[t])
        cond = fitted.T  # [model, org]
        tables[t] = cond / np.maximum(cond.sum(axis=1, keepdims=True), 1e-12)
    assert tables["HP"].shape == (len(MODELS), n_orgs)
    return tables


@dataclass(frozen=True, slots=True)
class DurationParams:
    """Per model: lognormal body (log-median, sigma) and the tail probability among tail-eligible jobs."""

    log_median: np.ndarray
    sigma: np.ndarray
    tail_prob: np.ndarray
    tail_lo_s: float
    tail_hi_s: float
    service_share: float  # of tail draws: run until the window end


def clipped_tail_mean(lo: float, hi: float, horizon: float) -> float:
    """E[min(D, H - S)] for D log-uniform on [lo, hi] <= H and S uniform on [0, H].

    E[min(D, H - S)] = E[D] - E[D^2] / (2H): the window end cuts long jobs submitted late, which
    the real trace's means include (it is clipped the same way).
    """
    log_ratio = math.log(hi / lo)
    mean = (hi - lo) / log_ratio
    second = (hi**2 - lo**2) / (2.0 * log_ratio)
    return mean - second / (2.0 * horizon) if hi <= horizon else mean


def duration_params(
    durations: DurationConfig,
    kind: str,
    *,
    eligible_share: np.ndarray,
    gang_factor: np.ndarray,
    horizon_s: float,
    mean_h: np.ndarray | None = None,
) -> DurationParams:
    """Body and tail per model so the median and mean of section 6.3 hold.

    `eligible_share`: share of the model's jobs that may draw a tail (single-worker, small);
    `gang_factor`: mean multiplier of the body from the gang exponent; `mean_h` overrides the
    target mean (HP: the t = 0 population's share of the mean is taken out first).
    """
    hp = kind == "HP"
    median = np.asarray(durations.hp_median_h if hp else durations.spot_median_h) * 3600.0
    if mean_h is None:
        mean_h = np.asarray(durations.hp_mean_h if hp else durations.spot_mean_h)
    mean = np.asarray(mean_h) * 3600.0
    sigma_type = durations.hp_sigma if hp else durations.spot_sigma
    lo_d, hi_d = durations.hp_tail_days if hp else durations.spot_tail_days
    lo, hi = lo_d * 86400.0, min(hi_d * 86400.0, max(horizon_s, lo_d * 86400.0 * 1.01))
    service = durations.hp_service_share if hp else 0.0
    # A service submitted at S runs H - S: mean H / 2 for submissions spread over the window.
    tail_mean = (1 - service) * clipped_tail_mean(lo, hi, max(horizon_s, hi)) + service * horizon_s / 2
    ratio = np.maximum(mean / median, 1.0 + 1e-9)
    sigma = np.minimum(sigma_type, np.sqrt(2.0 * np.log(ratio) * durations.body_headroom))
    body_single = median * np.exp(sigma**2 / 2.0)
    body_all = body_single * gang_factor
    q = np.clip((mean - body_all) / np.maximum(eligible_share * (tail_mean - body_single), 1e-9), 0.0, 1.0)
    # The tail sits above the median, so the body's median is lowered until the mixture's median
    # is the target: P(body < median) * (1 - tail share) = 1/2.
    body_quantile = np.clip(0.5 / np.maximum(1.0 - eligible_share * q, 0.5), 0.5, 0.999)
    z = np.array([NormalDist().inv_cdf(float(p)) for p in body_quantile])
    return DurationParams(np.log(median) - sigma * z, sigma, q, lo, hi, service)
