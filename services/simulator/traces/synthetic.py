"""A synthetic GFS-format trace over a real node inventory, calibrated to the published statistics.

Structure (CALIBRATION.md, "A structure that fits these targets"):
1. a t = 0 population of long-running HP jobs (the trace's left-censoring);
2. per type, a daily level: 10-day block means (regimes, Spot's late start) x AR(1) log noise x
   weekday factor x the HP burst of days 92-96;
3. per hour: hour-of-day index x log noise; Poisson arrival events with small same-second batches;
4. per job: model | type, gpu_request | type, model, workers | type, model, org | type, model,
   duration | type, model (lognormal body + long tail), cpu from a cpu-per-GPU ratio;
5. durations clipped at the window end; the A10 HP cap (synth_config.A10CapConfig).
Everything random comes from one `numpy.random.Generator` seeded by `config.seed`, drawn in a
fixed order, so a config reproduces its trace exactly.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gfs.services.simulator.traces import synth_adjust, synth_fit
from gfs.services.simulator.traces.columns import JobColumns
from gfs.services.simulator.traces.gfs_format import NODE_FILE, write_nodes
from gfs.services.simulator.traces.records import Trace, TraceNode
from gfs.services.simulator.traces.synth_config import ArrivalConfig, GeneratorConfig
from gfs.services.simulator.traces.synth_orgs import MODELS, ORG_PROFILE

GENERATOR_FILE = "generator.json"
GENERATOR_VERSION = 1
DAY_S = 86400.0


@dataclass(frozen=True, slots=True)
class SynthResult:
    columns: JobColumns  # sorted by submit time; job i is named str(i)
    nodes: tuple[TraceNode, ...]
    horizon_s: float
    a10_dropped: int
    models_without_nodes: tuple[str, ...]
    dropped_no_nodes: int
    load_factors: dict[str, tuple[float, float]]
    gangs_shrunk_to_pool: int = 0

    def to_trace(self) -> Trace:
        return Trace(nodes=self.nodes, jobs=self.columns.to_jobs(), horizon_s=self.horizon_s, source="synth")


def _norm(values: tuple[float, ...]) -> np.ndarray:
    a = np.asarray(values, dtype=float)
    return np.asarray(a / a.mean(), dtype=float)


def _daily_means(cfg: ArrivalConfig, kind: str, n_days: int, rng: np.random.Generator) -> np.ndarray:
    """Expected arrivals per day (before the hour profile), noise included."""
    # Day d of the trace is day start + d of the calibrated 184-day profile (regimes, weekday phase,
    # burst, Spot onset), so a short trace can be cut from any part of it.
    start = cfg.profile_start_day
    days = start + np.arange(n_days)
    blocks = np.asarray(cfg.hp_block_means if kind == "HP" else cfg.spot_block_means, dtype=float)
    # Beyond the calibrated 184 days the block profile repeats (documented approximation).
    level = blocks[(days // cfg.block_days) % len(blocks)]
    weekday = _norm(cfg.hp_weekday if kind == "HP" else cfg.spot_weekday)[days % 7]
    level = level * weekday
    if kind == "HP":
        for i, factor in enumerate(cfg.hp_burst_factors):
            if 0 <= cfg.burst_start_day + i - start < n_days:
                level[cfg.burst_start_day + i - start] *= factor
    else:
        pre = dict(cfg.spot_pre_onset)
        for day in range(cfg.spot_onset_day):
            if 0 <= day - start < n_days:
                level[day - start] = pre.get(day, cfg.spot_pre_onset_daily)
    noise = np.empty(n_days)
    x = rng.normal(0.0, cfg.day_noise_sd)
    innovation = math.sqrt(1.0 - cfg.day_noise_phi**2) * cfg.day_noise_sd
    for d in range(n_days):
        noise[d] = x
        x = cfg.day_noise_phi * x + rng.normal(0.0, innovation)
    return np.asarray(level * np.exp(noise - cfg.day_noise_sd**2 / 2.0), dtype=float)


def _arrivals(
    cfg: ArrivalConfig, kind: str, days: float, scale: float, rng: np.random.Generator
) -> np.ndarray:
    """Integer submit seconds in [0, days * 86400), sorted."""
    n_days = math.ceil(days)
    n_hours = math.ceil(days * 24)
    daily = _daily_means(cfg, kind, n_days, rng)
    hours = np.arange(n_hours)
    rate = daily[hours // 24] * _norm(cfg.hour_index)[hours % 24] / 24.0 * scale
    rate *= np.exp(rng.normal(0.0, cfg.hour_noise_sd, n_hours) - cfg.hour_noise_sd**2 / 2.0)
    events = rng.poisson(rate / cfg.mean_batch)
    event_hour = np.repeat(hours, events)
    event_t = np.floor((event_hour + rng.random(event_hour.size)) * 3600.0)
    batch = rng.geometric(1.0 / cfg.mean_batch, event_t.size)
    submit = np.repeat(event_t, batch)
    return np.sort(submit[submit < days * DAY_S])


def _choice_by_group(rng: np.random.Generator, group: np.ndarray, table: np.ndarray) -> np.ndarray:
    """For each element, draw a column index of `table[group]` (rows are pmfs), vectorised."""
    cdf = np.cumsum(table, axis=1)
    cdf /= cdf[:, -1:]
    u = rng.random(group.size)
    out = np.empty(group.size, dtype=np.int64)
    for g in range(table.shape[0]):
        mask = group == g
        out[mask] = np.minimum(np.searchsorted(cdf[g], u[mask], side="right"), table.shape[1] - 1)
    return out


@dataclass(frozen=True, slots=True)
class _Tables:
    gpu_pmf: dict[str, np.ndarray]
    multi_share: dict[str, np.ndarray]
    multi_pmf: dict[str, np.ndarray]
    org: dict[str, np.ndarray]
    duration: dict[str, synth_fit.DurationParams]


def _tables(config: GeneratorConfig) -> _Tables:
    s, d = config.sizes, config.durations
    values = np.asarray(s.gpu_values)
    gpu_pmf = {t: synth_fit.gpu_request_pmf(s, t) for t in synth_fit.TYPES}
    gpu_means = {t: gpu_pmf[t] @ values for t in synth_fit.TYPES}
    gangs = synth_fit.gang_model(s, gpu_means)
    multi_share = gangs.share
    # P(workers | multi-worker, type, model): [n_models, max + 1] per type.
    multi_pmf = {
        t: np.stack([synth_fit.multi_worker_pmf(float(mean), top) for mean in gangs.mean_size[t]])
        for t, top in (("HP", s.hp_max_workers), ("SPOT", s.spot_max_workers))
    }
    horizon = config.days * DAY_S
    limit = np.asarray(d.tail_max_gpu_request)[:, None]
    small = {t: (gpu_pmf[t] * (values[None, :] <= limit)).sum(axis=1) for t in synth_fit.TYPES}
    duration: dict[str, synth_fit.DurationParams] = {}
    for t in synth_fit.TYPES:
        ms = multi_share[t]
        exponent = d.hp_gang_exponent if t == "HP" else d.spot_gang_exponent
        k = np.arange(multi_pmf[t].shape[1], dtype=float)
        k[0] = 1.0
        gang_factor = 1.0 - ms + ms * (multi_pmf[t] @ k**-exponent)
        single_only = np.asarray(d.hp_tail_single_worker_only if t == "HP" else (True,) * len(MODELS))
        single = np.where(single_only, 1.0 - ms, 1.0)
        init_small = gpu_pmf["HP"] @ (values <= config.initial.long_max_gpu_request)
        mean_h = _hp_arrival_mean_h(config, gpu_pmf["HP"], init_small) if t == "HP" else None
        duration[t] = synth_fit.duration_params(
            d, t, eligible_share=single * small[t], gang_factor=gang_factor, horizon_s=horizon, mean_h=mean_h
        )
    return _Tables(gpu_pmf, multi_share, multi_pmf, synth_fit.org_tables(config), duration)


def _hp_arrival_mean_h(config: GeneratorConfig, gpu_pmf: np.ndarray, small: np.ndarray) -> np.ndarray:
    """HP mean duration per model for arrivals, with the t = 0 population's part taken out.

    The published per-model means count the t = 0 jobs too; without this, the long-lived t = 0 jobs
    would be added on top and inflate the per-model means (e.g. H800, GPU-series-1).
    """
    init, d = config.initial, config.durations
    horizon = config.days * DAY_S
    values = np.asarray(config.sizes.gpu_values)
    n_init = np.asarray(init.gpus_by_model) / (gpu_pmf @ values)
    lo, hi = d.hp_tail_days[0] * DAY_S, min(d.hp_tail_days[1] * DAY_S, horizon)
    tail_mean = (hi - lo) / math.log(hi / lo) if hi > lo else lo
    long_h = small * (init.full_window_share * horizon + init.tail_share * tail_mean) / 3600.0
    n_total = np.asarray(config.sizes.hp_jobs_by_model, dtype=float)
    total_h = np.asarray(d.hp_mean_h) * n_total
    floor = np.asarray(d.hp_median_h)
    return np.asarray(np.maximum(floor, (total_h - n_init * long_h) / np.maximum(n_total - n_init, 1.0)))


def _durations(
    rng: np.random.Generator, p: synth_fit.DurationParams, model: np.ndarray, workers: np.ndarray,
    gpu: np.ndarray, gang_exp: float, *, single_only: np.ndarray, tail_max_gpu: np.ndarray,
    size_exponent: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Durations (inf = until the window end) and which jobs drew the long tail."""
    body = np.exp(p.log_median[model] + p.sigma[model] * rng.normal(size=model.size))
    body *= np.where(workers > 1, workers.astype(float) ** -gang_exp, 1.0)
    eligible = (gpu <= tail_max_gpu) & ((workers == 1) | ~single_only)
    prob = p.tail_prob[model]
    if size_exponent is not None:
        weight = (gpu * workers) ** size_exponent[model]
        for m in np.unique(model):  # renormalise per model over its eligible jobs
            mask = eligible & (model == m)
            if mask.any():
                weight[mask] /= weight[mask].mean()
        prob = np.minimum(1.0, prob * weight)
    tail = eligible & (rng.random(model.size) < prob)
    log_tail = rng.uniform(math.log(p.tail_lo_s), math.log(p.tail_hi_s), model.size)
    service = rng.random(model.size) < p.service_share
    # inf = until the window end; generate() clips every duration there.
    return np.where(tail, np.where(service, np.inf, np.exp(log_tail)), body), tail


def _jobs_of_type(
    config: GeneratorConfig, tables: _Tables, kind: str, submit: np.ndarray, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    s = config.sizes
    n = submit.size
    jobs_by_model = np.asarray(s.hp_jobs_by_model if kind == "HP" else s.spot_jobs_by_model, dtype=float)
    model = rng.choice(len(MODELS), size=n, p=jobs_by_model / jobs_by_model.sum())
    gpu = np.asarray(s.gpu_values)[_choice_by_group(rng, model, tables.gpu_pmf[kind])]
    multi = rng.random(n) < tables.multi_share[kind][model]
    workers = np.where(multi, _choice_by_group(rng, model, tables.multi_pmf[kind]), 1)
    org = _choice_by_group(rng, model, tables.org[kind])
    d = config.durations
    single_only = np.asarray(d.hp_tail_single_worker_only if kind == "HP" else (True,) * len(MODELS))
    duration, tail = _durations(
        rng, tables.duration[kind], model, workers, gpu,
        d.hp_gang_exponent if kind == "HP" else d.spot_gang_exponent,
        single_only=single_only[model], tail_max_gpu=np.asarray(d.tail_max_gpu_request)[model],
        size_exponent=np.asarray(d.hp_tail_size_exponent) if kind == "HP" else None,
    )  # fmt: skip
    return {
        "model": model,
        "gpu": gpu,
        "workers": workers,
        "org": org,
        "submit": submit,
        "duration": duration,
        "tail": tail & (kind == "HP"),
    }


def _initial_population(
    config: GeneratorConfig, tables: _Tables, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """HP single-worker jobs at t = 0 adding up to the per-model GPU targets (x scale)."""
    init = config.initial
    values = np.asarray(config.sizes.gpu_values)
    parts: list[np.ndarray] = []
    for m, model_name in enumerate(MODELS):
        target = init.gpus_by_model[m] * config.scale
        if model_name == "A10" and config.a10_cap.enabled:
            target *= config.a10_cap.initial_factor
        pmf = tables.gpu_pmf["HP"][m]
        mean = float(pmf @ values)
        k = int(target / mean * 1.5) + 10
        draws = values[rng.choice(values.size, size=k, p=pmf)]
        take = int(np.searchsorted(np.cumsum(draws), target, side="left")) + 1 if target > 0 else 0
        parts.append(np.full(min(take, k), m))
    model = np.concatenate(parts).astype(np.int64)
    gpu = np.asarray(config.sizes.gpu_values)[_choice_by_group(rng, model, tables.gpu_pmf["HP"])]
    n = model.size
    p = tables.duration["HP"]
    body = np.exp(p.log_median[model] + p.sigma[model] * rng.normal(size=n))
    tail = np.exp(rng.uniform(math.log(p.tail_lo_s), math.log(p.tail_hi_s), n))
    u = rng.random(n)
    small = gpu <= init.long_max_gpu_request
    full = small & (u < init.full_window_share)
    long = small & ~full & (u < init.full_window_share + init.tail_share)
    duration = np.where(full, np.inf, np.where(long, tail, body))
    org = _choice_by_group(rng, model, tables.org["HP"])
    return {
        "model": model, "gpu": gpu, "workers": np.ones(n, dtype=np.int64), "org": org,
        "submit": np.zeros(n), "duration": duration, "tail": np.zeros(n, dtype=bool),
    }  # fmt: skip


def _cpu(config: GeneratorConfig, gpu: np.ndarray, model: np.ndarray, max_cpu: np.ndarray,
         rng: np.random.Generator) -> np.ndarray:  # fmt: skip
    edges = np.asarray(config.cpu_per_gpu_edges)
    shares = np.asarray(config.cpu_per_gpu_shares)
    bucket = rng.choice(shares.size, size=gpu.size, p=shares / shares.sum())
    ratio = np.exp(rng.uniform(np.log(edges[bucket]), np.log(edges[bucket + 1])))
    return np.asarray(np.clip(np.round(gpu * ratio), 1, max_cpu[model]), dtype=float)


def generate(config: GeneratorConfig, nodes: tuple[TraceNode, ...]) -> SynthResult:
    """Generate the trace for `config` over `nodes` (only models present in `nodes` get jobs)."""
    # Independent child streams per component, so a change in one (e.g. the A10 cap shrinking the
    # t = 0 population) leaves the others' draws identical: cap on/off traces stay paired.
    streams = np.random.SeedSequence(config.seed).spawn(4)
    rng_init, rng_cpu = np.random.default_rng(streams[0]), np.random.default_rng(streams[3])
    rng_type = {"HP": np.random.default_rng(streams[1]), "SPOT": np.random.default_rng(streams[2])}
    tables = _tables(config)
    horizon = config.days * DAY_S
    parts = [_initial_population(config, tables, rng_init)]
    spot_flags = [np.zeros(parts[0]["model"].size, dtype=bool)]
    for kind in synth_fit.TYPES:
        submit = _arrivals(config.arrivals, kind, config.days, config.scale, rng_type[kind])
        part = _jobs_of_type(config, tables, kind, submit, rng_type[kind])
        parts.append(part)
        spot_flags.append(np.full(submit.size, kind == "SPOT"))
    cat = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    is_spot = np.concatenate(spot_flags)
    # A gang larger than its whole pool could never start; shrink it to the pool (reported).
    pool_gpus = np.array([sum(n.gpus for n in nodes if n.gpu_model == m) for m in MODELS], dtype=float)
    fit = np.maximum(1, np.floor(pool_gpus[cat["model"]] / cat["gpu"])).astype(np.int64)
    too_big = cat["workers"] > fit
    cat["workers"] = np.where(too_big, fit, cat["workers"])
    load_factors = synth_adjust.match_load(config, cat, is_spot, horizon)
    # Clip at the window end (the real trace cuts durations there) and keep whole seconds >= 1.
    duration = np.minimum(cat["duration"], horizon - cat["submit"])
    if config.a10_cap.enabled:  # after clipping, so services running to the end shrink too
        a10_hp = (cat["model"] == MODELS.index("A10")) & ~is_spot
        duration = np.where(a10_hp, duration * config.a10_cap.duration_factor, duration)
    duration = np.maximum(1.0, np.ceil(duration))
    max_cpu = np.array(
        [max((n.cpus for n in nodes if n.gpu_model == m), default=192) for m in MODELS], dtype=float
    )
    cpu = _cpu(config, cat["gpu"], cat["model"], max_cpu, rng_cpu)
    cols = JobColumns(
        models=MODELS,
        orgs=tuple(str(row[0]) for row in ORG_PROFILE),
        model=cat["model"].astype(np.int64),
        org=cat["org"].astype(np.int64),
        is_spot=is_spot,
        gpu_request=cat["gpu"].astype(float),
        workers=cat["workers"].astype(np.int64),
        cpu_request=cpu,
        submit_s=cat["submit"].astype(float),
        duration_s=duration,
    ).sorted_by_submit()
    present = {n.gpu_model for n in nodes}
    absent = tuple(m for m in MODELS if m not in present)
    has_nodes = np.isin(cols.model, [MODELS.index(m) for m in MODELS if m in present])
    dropped_no_nodes = int((~has_nodes).sum())
    cols = cols.take(has_nodes)
    a10_dropped = 0
    if config.a10_cap.enabled and "A10" in present:
        capacity = float(sum(n.gpus for n in nodes if n.gpu_model == "A10"))
        keep = synth_adjust.a10_cap_keep_mask(
            cols, MODELS.index("A10"), capacity, config.a10_cap.peak_fraction, horizon
        )
        a10_dropped = int((~keep).sum())
        cols = cols.take(keep)
    return SynthResult(
        cols, nodes, horizon, a10_dropped, absent, dropped_no_nodes, load_factors, int(too_big.sum())
    )


def write_synthetic(
    result: SynthResult, config: GeneratorConfig, out_dir: Path, *, wall_s: float
) -> dict[str, Any]:
    """Write node_info_df.csv, job_info_df.csv and generator.json; return generator.json's content."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_nodes(result.nodes, out_dir / NODE_FILE)
    result.columns.write_job_csv(out_dir)
    cols = result.columns
    cap = config.a10_cap
    meta = {
        "generator": "gfs-synth",
        "version": GENERATOR_VERSION,
        "seed": config.seed,
        "config_sha256": config.digest(),
        "a10_cap": f"on: A10 HP demand <= {cap.peak_fraction:.2f} x capacity"
        if cap.enabled
        else "off: real A10 over-subscription kept",
        "jobs": len(cols),
        "hp_jobs": int((~cols.is_spot).sum()),
        "spot_jobs": int(cols.is_spot.sum()),
        "horizon_s": result.horizon_s,
        "a10_hp_jobs_dropped_by_cap": result.a10_dropped,
        "models_without_nodes": list(result.models_without_nodes),
        "jobs_dropped_no_nodes": result.dropped_no_nodes,
        "gangs_shrunk_to_pool_size": result.gangs_shrunk_to_pool,
        "hp_duration_factors_for_load (tail, all HP arrivals)": result.load_factors,
        "generate_wall_s": round(wall_s, 3),
        "config": config.to_dict(),
    }
    (out_dir / GENERATOR_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta


def synthesize(config: GeneratorConfig, nodes: tuple[TraceNode, ...], out_dir: Path) -> dict[str, Any]:
    """Generate and write a trace; generator.json records the config, its hash and what was adjusted."""
    started = time.perf_counter()
    result = generate(config, nodes)
    return write_synthetic(result, config, out_dir, wall_s=time.perf_counter() - started)
