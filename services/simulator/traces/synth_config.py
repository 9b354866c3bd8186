"""The synthetic GFS trace generator's configuration: every parameter, frozen, hashable, in JSON.

Defaults are calibrated to shared/data/gfs-v2026/stats (CALIBRATION.md sections in comments). They
are constants here, not read from that folder, so the generator runs on a machine without it.
A run's config (with its seed and a hash of both) is written to DIR/generator.json; comparing
policies on a trace whose generator.json hash differs is comparing different workloads.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from gfs.services.simulator.traces.synth_orgs import MODELS

# Per model in MODELS order: A10, A100-SXM4-80GB, A800-SXM4-80GB, GPU-series-1, GPU-series-2, H800.
Six = tuple[float, float, float, float, float, float]


@dataclass(frozen=True, slots=True)
class ArrivalConfig:
    """Daily level x weekday x burst x hour-of-day, with noise at day and hour scale (section 2)."""

    # Mean arrivals per day in each 10-day block (days 0-9, 10-19, ...), burst days 92-96 and the
    # t = 0 population excluded; Spot from day 31 on (daily_summary.csv).
    hp_block_means: tuple[float, ...] = (
        3711, 2370, 1940, 1603, 2578, 3443, 2082, 2665, 2548, 1694,
        1502, 2185, 1539, 1134, 1412, 1499, 1236, 1404, 1253,
    )  # fmt: skip
    spot_block_means: tuple[float, ...] = (
        0, 0, 0, 549, 153, 199, 341, 251, 208, 204,
        254, 376, 603, 329, 267, 400, 471, 424, 314,
    )  # fmt: skip
    block_days: int = 10
    # Trace day 0 = this day of the profile (e.g. 120 for a short trace with Spot and the late regime).
    profile_start_day: int = 0
    # Spot before its onset on day 31: days 0-27 have 6 jobs in all, days 28-30 have 6, 15, 33.
    spot_onset_day: int = 31
    spot_pre_onset: tuple[tuple[int, float], ...] = ((28, 6.0), (29, 15.0), (30, 33.0))
    spot_pre_onset_daily: float = 6.0 / 28.0
    # Day-of-week factors (day mod 7), section 2.2; normalised to mean 1 by the generator.
    hp_weekday: tuple[float, ...] = (0.90, 0.78, 0.73, 1.08, 1.12, 1.10, 1.04)
    spot_weekday: tuple[float, ...] = (0.89, 0.64, 0.73, 1.29, 1.12, 1.16, 0.95)
    # Hour-of-day index (section 2.3, corrected for the t = 0 population); normalised to mean 1.
    hour_index: tuple[float, ...] = (
        0.97, 0.83, 0.73, 0.69, 0.67, 0.73, 0.74, 0.78, 0.83, 0.88, 1.30, 1.33,
        1.02, 1.00, 1.31, 1.30, 1.40, 1.32, 1.04, 1.10, 1.13, 0.99, 0.98, 0.94,
    )  # fmt: skip
    # HP burst on days 92-96: daily HP count / its block's baseline (5,789 ... 7,337 over 1,694).
    burst_start_day: int = 92
    hp_burst_factors: tuple[float, ...] = (3.42, 8.14, 6.74, 6.19, 4.33)
    # Day-level log noise, AR(1): persistence between days (section 2.1: lag-1 autocorr 0.79 with
    # the regimes included) and its stationary sd. Mean-corrected so the expected level is kept.
    day_noise_phi: float = 0.6
    day_noise_sd: float = 0.2
    # Hour-level log noise (independent per hour): within-day burstiness (section 2.4).
    hour_noise_sd: float = 0.3
    # Same-second batches: each arrival event brings 1 + Geometric extra jobs (section 2.5).
    mean_batch: float = 1.15


@dataclass(frozen=True, slots=True)
class InitialConfig:
    """The population already running at t = 0 (section 0 and 8.1): HP, single-worker."""

    gpus_by_model: Six = (2249.0, 2117.0, 107.0, 738.0, 229.0, 1416.0)
    # Jobs asking <= DurationConfig.tail_max_gpu_request GPUs: this share runs to the window end
    # (the 200 longest jobs are these), `tail_share` gets a long residual (log-uniform over the HP
    # tail range); the rest, and all larger jobs, get a body duration.
    full_window_share: float = 0.45
    tail_share: float = 0.35
    long_max_gpu_request: float = 1.0


@dataclass(frozen=True, slots=True)
class SizeConfig:
    """gpu_request and worker_num (sections 1.2, 3, 4)."""

    # Jobs per model and type (section 1.2).
    hp_jobs_by_model: Six = (226881, 137396, 4690, 16054, 22340, 8352)
    spot_jobs_by_model: Six = (1762, 31624, 4109, 2857, 8057, 2745)
    # gpu_request value counts per type (section 3).
    gpu_values: tuple[float, ...] = (
        0.01, 0.1, 0.2, 0.25, 0.3, 0.4, 0.5, 0.67, 0.8, 0.85, 1, 2, 3, 4, 5, 6, 7, 8,
    )  # fmt: skip
    hp_gpu_counts: tuple[float, ...] = (
        2, 2428, 8354, 1, 11996, 74, 25359, 6, 2, 3, 279827, 19589, 38, 12211, 45, 221, 24, 55533,
    )  # fmt: skip
    spot_gpu_counts: tuple[float, ...] = (
        0, 0, 0, 0, 0, 0, 1013, 0, 0, 0, 35095, 3396, 8, 5812, 11, 9, 0, 5810,
    )  # fmt: skip
    # Prior weight of each whole-GPU value (1, 2, 4, 8; odd values get `odd_weight`) per model,
    # from the per-model medians (A10 1, A100 1, A800 2, GPU-s1 1, GPU-s2 4, H800 8). Fitted to the
    # type totals by iterative proportional fitting; A10 only takes values <= 1 (1 GPU per node),
    # HP fractions only sit on A10 (they add up exactly: section 3 inference).
    whole_gpu_prior: tuple[tuple[float, float, float, float], ...] = (
        (1, 0, 0, 0), (6, 1, 1, 2), (2, 3, 1, 1), (8, 1, 0.5, 1), (1, 1, 3, 3), (0.5, 0.5, 1, 8),
    )  # fmt: skip
    odd_weight: float = 0.01
    spot_fraction_models: tuple[str, ...] = ("A10", "A100-SXM4-80GB")
    # Multi-worker share per type and mean size among multi-worker jobs (section 4.1).
    hp_multi_share: float = 0.0557
    spot_multi_share: float = 0.3153
    hp_multi_mean: float = 7.89
    spot_multi_mean: float = 11.11
    hp_max_workers: int = 182
    spot_max_workers: int = 332
    # Mean GPU demand per job per model (section 1.2): the per-model multi-worker tilt is solved
    # so these hold while the type-level multi-worker shares above are kept.
    mean_demand_by_model: Six = (0.92, 4.90, 6.13, 2.16, 14.56, 65.02)


@dataclass(frozen=True, slots=True)
class DurationConfig:
    """Duration per model x type (section 6): lognormal body + log-uniform tail, mean-matched."""

    hp_median_h: Six = (0.11, 0.52, 0.39, 1.10, 0.37, 0.26)
    hp_mean_h: Six = (66.21, 25.32, 12.14, 315.42, 8.07, 5.46)
    spot_median_h: Six = (1.33, 0.48, 0.39, 2.61, 1.42, 0.32)
    spot_mean_h: Six = (13.21, 3.44, 1.73, 3.87, 3.42, 6.05)
    # Body spread from the type quartiles (HP 205/1101/4009 s, Spot 543/2096/8630 s).
    hp_sigma: float = 2.2
    spot_sigma: float = 2.05
    # A model whose mean/median ratio is small gets a narrower body, leaving this share of
    # log(mean/median) headroom for the tail.
    body_headroom: float = 0.85
    # Tails: HP has multi-month services (up to the whole window); Spot's longest is 67.7 days.
    hp_tail_days: tuple[float, float] = (3.0, 184.0)
    # Share of HP tail draws that are services running until the window end (clipped there):
    # GPU-series-1's mean of 315 h with a 1.1 h median needs mass near the full window.
    hp_service_share: float = 0.5
    spot_tail_days: tuple[float, float] = (1.0, 67.7)
    # Tail draws only for single-worker jobs (the 200 longest jobs are single-worker, and big gangs
    # are short: section 5), which gives the negative size-duration dependence GPU-s needs.
    # Per model for HP (Spot: always): on A10, A100 and GPU-series-1 mean demand x mean duration
    # exceeds the real GPU-s, so long jobs there are single-worker; on A800, GPU-series-2 and H800
    # it falls short, so gangs may be long too (section 1.2 vs 6.3).
    hp_tail_single_worker_only: tuple[bool, ...] = (True, True, False, True, False, False)
    # ... and, per model, only for jobs asking at most this many GPUs per worker. 192 of the 200
    # longest jobs ask 1 GPU, and on GPU-series-1 mean demand x mean duration is twice the real
    # GPU-s (section 1.2 vs 6.3), so its long jobs must be small; elsewhere the product matches
    # (size and duration nearly independent, rho = -0.02), so any size may be long.
    tail_max_gpu_request: Six = (1.0, 8.0, 8.0, 1.0, 8.0, 8.0)
    # HP only: within a model, a tail-eligible job's tail probability is weighted by its total GPUs
    # ** exponent (renormalised, so the model's tail share and mean duration are kept). On A800,
    # GPU-series-2 and H800 the real GPU-s exceeds mean demand x mean duration (section 1.2 vs
    # 6.3), so there the big jobs are the long ones; elsewhere size and duration stay independent.
    hp_tail_size_exponent: Six = (0.0, 0.0, 0.6, 0.0, 0.15, 0.5)
    # Multi-worker body durations are scaled by workers ** -exponent (0 = no effect). Spot: 0.3 brings
    # Spot GPU-s to the real 3.45 B while keeping the Spot duration quartiles (big Spot gangs are short).
    hp_gang_exponent: float = 0.0
    spot_gang_exponent: float = 0.3


@dataclass(frozen=True, slots=True)
class A10CapConfig:
    """A10's HP load: the real trace asks 1.33x capacity on average (section 8.1, trap 5).

    With the cap on, A10 HP durations and the t = 0 A10 population are scaled down, then A10 HP jobs
    that would push the per-minute A10 HP demand above `peak_fraction` x capacity are dropped (in
    submit order); the count is reported in generator.json.
    """

    enabled: bool = True
    peak_fraction: float = 0.9
    duration_factor: float = 0.5
    initial_factor: float = 0.6


@dataclass(frozen=True, slots=True)
class LoadConfig:
    """Per-model HP+Spot GPU load, matched by stretching or shrinking the HP tail draws.

    Per-model load is dominated by a few long, large jobs, so it swings by 2-4x between seeds
    (e.g. H800 0.16-0.92 of capacity); the scheduler comparison depends on contention per pool,
    so after sampling, each model's long HP jobs (the tail draws, not the body or the t = 0
    population) are scaled by one factor so the time-averaged requested GPUs hit the real value
    (section 8.1, exact time average / capacity). Capacities are the real fleet's x `scale`, so
    `--scale` still scales the load. The factors are reported in generator.json. A10 is left to
    A10CapConfig while the cap is on.
    """

    enabled: bool = True
    load_by_model: Six = (1.33, 0.74, 0.68, 0.76, 0.67, 0.63)
    reference_capacity: Six = (2494.0, 3456.0, 176.0, 1558.0, 976.0, 1752.0)
    factor_bounds: tuple[float, float] = (0.05, 20.0)


@dataclass(frozen=True, slots=True)
class GeneratorConfig:
    days: float = 184.0
    scale: float = 1.0
    seed: int = 0
    n_orgs: int = 84
    # cpu_request per GPU (cpu / gpu_request, section 5): bucket edges and job shares.
    cpu_per_gpu_edges: tuple[float, ...] = (0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256)
    cpu_per_gpu_shares: tuple[float, ...] = (0.72, 0.08, 11.93, 11.80, 62.20, 9.02, 3.37, 0.70, 0.18)
    arrivals: ArrivalConfig = field(default_factory=ArrivalConfig)
    initial: InitialConfig = field(default_factory=InitialConfig)
    sizes: SizeConfig = field(default_factory=SizeConfig)
    durations: DurationConfig = field(default_factory=DurationConfig)
    a10_cap: A10CapConfig = field(default_factory=A10CapConfig)
    load: LoadConfig = field(default_factory=LoadConfig)

    @property
    def models(self) -> tuple[str, ...]:
        return MODELS

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def digest(self) -> str:
        """SHA-256 of the canonical JSON of every parameter, seed included."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GeneratorConfig:
        def build(kind: type, values: dict[str, Any]) -> Any:
            kwargs = {}
            for f in dataclasses.fields(kind):
                if f.name not in values:
                    continue
                v = values[f.name]
                sub = _SUBCONFIGS.get(f.name)
                kwargs[f.name] = build(sub, v) if sub is not None else _tuples(v)
            return kind(**kwargs)

        config: GeneratorConfig = build(cls, data)
        return config


def _tuples(value: Any) -> Any:
    """JSON lists back to the tuples the frozen config holds (so the digest is stable)."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


_SUBCONFIGS: dict[str, type] = {
    "arrivals": ArrivalConfig,
    "initial": InitialConfig,
    "sizes": SizeConfig,
    "durations": DurationConfig,
    "a10_cap": A10CapConfig,
    "load": LoadConfig,
}
