"""`gfs evaluate`: run a grid of policies x generator seeds x HP load levels (plus GFS's
sensitivity to p and the guarantee hours), or a robustness suite (policies x regimes x the seeds
of one split), in worker processes and aggregate the metrics.

Each cell regenerates its trace from the frozen generator config (cheap next to the simulation),
so a worker needs nothing but the cell and the config, and any cell can be rerun alone.
Results are keyed and sorted, so the report does not depend on the order workers finish in.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

import numpy as np

from gfs.services.core.policies.registry import build_policy
from gfs.services.core.quota import QuotaSettings
from gfs.services.simulator.engine import Simulation
from gfs.services.simulator.evaluate_config import EvaluateConfig, resolve_nodes
from gfs.services.simulator.evaluate_metrics import DERIVED, METRICS, POOL_METRICS, REPORT_METRICS, spread
from gfs.services.simulator.evaluate_trace import (
    CellTrace,
    cell_trace,
    regime_trace,
    scaled_nodes,
    window_load,
    with_guarantee_hours,
)
from gfs.services.simulator.result import build_policy_result
from gfs.services.simulator.runner import ForecastSource, RunSettings, build_simulation, prepare
from gfs.services.simulator.traces.gfs_format import read_nodes
from gfs.services.simulator.traces.records import Trace

MAX_JOB_SHARE = 0.5  # evaluate_trace.narrow_gangs


@dataclass(frozen=True, slots=True)
class Cell:
    """One simulation: `study` is "grid", "p" (guarantee rate), "hours" (guarantee hours),
    "target" (the feedback's target eviction rate; 0 = the default, 1 - p) or "regime" (a
    robustness-suite regime, named by `regime`)."""

    study: str
    policy: str
    seed: int
    load: float
    guarantee_rate: float = 0.9
    guarantee_hours: int = 1
    target_rate: float = 0.0
    regime: str = ""

    @property
    def key(self) -> str:
        rate, hours = f"{self.guarantee_rate:g}", self.guarantee_hours
        target = f"|e{self.target_rate:g}" if self.target_rate else ""  # keeps older keys unchanged
        regime = f"|R{self.regime}" if self.regime else ""
        return f"{self.study}|{self.policy}|s{self.seed}|L{self.load:g}|p{rate}|H{hours}{target}{regime}"

    def as_dict(self) -> dict[str, Any]:
        """The cell's fields; `regime` only for suite cells, so grid cells read as they always did."""
        data = dataclasses.asdict(self)
        if not self.regime:
            data.pop("regime")
        return data


def grid_cells(cfg: EvaluateConfig, split: str = "test") -> list[Cell]:
    """The config's cells; for a suite, every regime x policy at the seeds of `split`."""
    if cfg.is_suite:
        # Seed-major: every finished seed gives a complete regime x policy block to compare.
        return [
            Cell("regime", p, s, r.load, regime=r.name)
            for s in cfg.split_seeds(split)
            for r in cfg.regimes
            for p in cfg.policies
        ]
    # Seed-major: every finished seed gives a complete policy x load block to compare.
    cells = [Cell("grid", p, s, load) for s in cfg.seeds for load in cfg.loads for p in cfg.policies]
    sens = cfg.sensitivity
    if sens is not None:
        for load in sens.loads:
            cells += [
                Cell("p", sens.policy, s, load, guarantee_rate=r)
                for r in sens.guarantee_rates
                for s in sens.seeds
            ]
            cells += [
                Cell("hours", sens.policy, s, load, guarantee_hours=h)
                for h in sens.guarantee_hours
                for s in sens.seeds
            ]
            cells += [
                Cell("target", sens.policy, s, load, target_rate=e)
                for e in sens.target_rates
                for s in sens.seeds
            ]
    return cells


def cell_simulation(cfg: EvaluateConfig, cell: Cell) -> tuple[Simulation, CellTrace, Trace]:
    """The cell's trace and its policy's simulation, not yet run (a driver may attach observers)."""
    if cell.regime:
        ct = regime_trace(
            cfg.regime(cell.regime),
            read_nodes(resolve_nodes(cfg.nodes)),
            seed=cell.seed,
            max_job_share=MAX_JOB_SHARE,
        )
    else:
        nodes = scaled_nodes(read_nodes(resolve_nodes(cfg.nodes)), cfg.node_fraction)
        ct = cell_trace(
            cfg.base_generator(), nodes, seed=cell.seed, load=cell.load, max_job_share=MAX_JOB_SHARE
        )
    trace = ct.trace if cell.guarantee_hours == 1 else with_guarantee_hours(ct.trace, cell.guarantee_hours)
    settings = RunSettings(
        forecast=ForecastSource(cfg.forecast),
        seed=cell.seed,
        window_days=cfg.window_days,
        drain_days=cfg.drain_days,
    )
    workload, demand = prepare(trace, settings)
    quota_settings = dataclasses.replace(
        QuotaSettings(),
        guarantee_rate=cell.guarantee_rate,
        target_eviction_rate=cell.target_rate or None,
    )
    policy = build_policy(cell.policy, quota_settings)
    sim = build_simulation(
        workload, demand, policy, dataclasses.replace(settings, t_win_days=cfg.window_days)
    )
    return sim, ct, trace


def run_cell(cfg: EvaluateConfig, cell: Cell) -> dict[str, Any]:
    """Generate the cell's trace, simulate its policy, return its metrics (JSON-ready)."""
    started = time.perf_counter()
    sim, ct, trace = cell_simulation(cfg, cell)
    workload = sim.w
    sim.run()
    result = build_policy_result(sim)
    m = result.metrics
    out = {
        "key": cell.key,
        "cell": cell.as_dict(),
        "trace_sha256": ct.generator.digest(),
        "jobs": len(trace.jobs),
        "narrowed_jobs": ct.narrowed_jobs,
        "hp_jobs_thinned": ct.hp_jobs_thinned,
        "metrics": {k: float(m[k]) for k in METRICS},
        "pools": {p: {k: float(v[k]) for k in POOL_METRICS} for p, v in sorted(m["pools"].items())},
        "wall_s": time.perf_counter() - started,
    }
    if cell.regime:
        # What the regime's workload offers in the scored window, so regimes of either generator
        # can be compared on the same footing (a synth "load" is a share of its calibrated load).
        offered = window_load(trace, workload.window_start_s, workload.window_end_s)
        out["workload"] = {
            "hp_load_window": offered["HP"],
            "spot_load_window": offered["SPOT"],
            "gpus": float(sum(n.gpus for n in trace.nodes)),
            "pools": len({n.gpu_model for n in trace.nodes}),
        }
    return out


def run_grid(
    cfg: EvaluateConfig,
    cells: Sequence[Cell],
    progress: Callable[[dict[str, Any]], None] | None = None,
    done: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Run the cells not already in `done` (results of an interrupted run of the same config);
    `progress` sees each new result as it arrives (the CLI appends it to cells.jsonl)."""
    results: list[dict[str, Any]] = [r for r in done if r["key"] in {c.key for c in cells}]
    finished = {r["key"] for r in results}
    todo = [c for c in cells if c.key not in finished]
    if cfg.workers == 1:
        for cell in todo:
            results.append(run_cell(cfg, cell))
            if progress:
                progress(results[-1])
    else:
        with ProcessPoolExecutor(max_workers=cfg.workers) as pool:
            futures = [pool.submit(run_cell, cfg, c) for c in todo]
            try:
                for fut in as_completed(futures):
                    results.append(fut.result())
                    if progress:
                        progress(results[-1])
            except BaseException:
                # A failed cell (or Ctrl-C) ends the run now: leaving the pool would first run
                # every queued cell. The cells already written stay for --resume.
                for fut in futures:
                    fut.cancel()
                raise
    return sorted(results, key=lambda r: r["key"])


# ----- aggregation ------------------------------------------------------------------------------
SWEEPS = (("p", "guarantee_rate"), ("hours", "guarantee_hours"), ("target", "target_rate"))


def _sweep_value(cell: dict[str, Any], field: str) -> float:
    """The swept setting of a cell; a cell without a target (older cells, the grid's) steers to 1 - p."""
    if field == "target_rate":
        return float(cell.get("target_rate") or 1.0 - cell["guarantee_rate"])
    return float(cell[field])


def relative_change(ours: float, theirs: float) -> float:
    """(ours - theirs) / |theirs| in percent; nan when the baseline is 0 (no finite change)."""
    if theirs == 0:
        return 0.0 if ours == 0 else math.nan
    return 100.0 * (ours - theirs) / abs(theirs)


def with_derived(result: dict[str, Any]) -> dict[str, Any]:
    """The cell with the derived metrics; a metric the cell predates (cells written before it was
    measured, e.g. the in-window measure) is NaN, so old reports can still be rebuilt."""
    m = {k: math.nan for k in METRICS} | result["metrics"]
    pools = {p: {k: math.nan for k in POOL_METRICS} | v for p, v in result.get("pools", {}).items()}
    return {**result, "metrics": {**m, **{k: f(m) for k, f in DERIVED.items()}}, "pools": pools}


def aggregate(cfg: EvaluateConfig, results: Sequence[dict[str, Any]], split: str = "test") -> dict[str, Any]:
    results = [with_derived(r) for r in results]
    grid = [r for r in results if r["cell"]["study"] == "grid"]
    by: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for r in grid:
        by.setdefault((r["cell"]["policy"], r["cell"]["load"]), []).append(r)
    table = {
        f"{p}|{load:g}": {m: spread([r["metrics"][m] for r in rs]) for m in REPORT_METRICS}
        for (p, load), rs in sorted(by.items())
    }
    pools: dict[str, Any] = {}
    for (p, load), rs in sorted(by.items()):
        names = sorted({pool for r in rs for pool in r["pools"]})
        pools[f"{p}|{load:g}"] = {
            pool: {m: spread([r["pools"][pool][m] for r in rs if pool in r["pools"]]) for m in POOL_METRICS}
            for pool in names
        }
    ref = cfg.reference
    changes: dict[str, Any] = {}
    for (p, load), rs in sorted(by.items()):
        if p == ref:
            continue
        mine = {r["cell"]["seed"]: r for r in by.get((ref, load), [])}
        paired = [(mine[r["cell"]["seed"]], r) for r in rs if r["cell"]["seed"] in mine]
        if not paired:
            continue
        changes[f"{p}|{load:g}"] = {
            m: {
                **spread([relative_change(a["metrics"][m], b["metrics"][m]) for a, b in paired]),
                "of_means": relative_change(
                    float(np.mean([a["metrics"][m] for a, _ in paired])),
                    float(np.mean([b["metrics"][m] for _, b in paired])),
                ),
            }
            for m in REPORT_METRICS
        }
    sens: dict[str, Any] = {}
    cfg_sens = cfg.sensitivity
    for study, field in SWEEPS:
        per_load: dict[str, Any] = {}
        if cfg_sens is None:
            sens[study] = per_load
            continue
        for load in cfg_sens.loads:
            groups: dict[float, list[dict[str, Any]]] = {}
            for r in results:
                c = r["cell"]
                if c["load"] != load or c["policy"] != cfg_sens.policy or c["seed"] not in cfg_sens.seeds:
                    continue
                # The grid's own cells of the swept policy are the default point of every sweep.
                if c["study"] in (study, "grid"):
                    groups.setdefault(_sweep_value(c, field), []).append(r)
            if any(r["cell"]["study"] == study for rs in groups.values() for r in rs):
                per_load[f"{load:g}"] = {
                    f"{v:g}": {m: spread([r["metrics"][m] for r in rs]) for m in REPORT_METRICS}
                    for v, rs in sorted(groups.items())
                }
        sens[study] = per_load
    out = {
        "table": table,
        "pools": pools,
        "change_vs_reference": changes,
        "sensitivity": sens,
        "tradeoff": tradeoff(cfg, table, sens),
    }
    if cfg.is_suite:
        from gfs.services.simulator.evaluate_suite import suite_aggregate

        out["suite"] = suite_aggregate(cfg, results, split)
    return out


TRADEOFF_AXES = ("lp_eviction_rate_in_window", "lp_queue_delay_mean_s")


def tradeoff(cfg: EvaluateConfig, table: dict[str, Any], sens: dict[str, Any]) -> dict[str, Any]:
    """Per HP load: the swept policy's settings (p sweep and target sweep, means over seeds) as
    points of LP eviction rate (in window) against LP queueing delay, and for every other policy
    whether the default setting dominates it (lower on both) and which settings do."""
    if cfg.sensitivity is None:
        return {}
    ours = cfg.sensitivity.policy
    out: dict[str, Any] = {}
    for load in cfg.loads:
        lk = f"{load:g}"
        points: dict[str, tuple[float, float]] = {}
        for study, label in (("p", "p={}"), ("target", "target={}")):
            for value, row in sens.get(study, {}).get(lk, {}).items():
                rate, wait = (float(row[m]["mean"]) for m in TRADEOFF_AXES)
                points[label.format(value)] = (rate, wait)
        default_row = table.get(f"{ours}|{lk}")
        if default_row is None:
            continue
        default = tuple(default_row[m]["mean"] for m in TRADEOFF_AXES)
        versus: dict[str, Any] = {}
        for policy in cfg.policies:
            row = table.get(f"{policy}|{lk}")
            if policy == ours or row is None:
                continue
            theirs = tuple(row[m]["mean"] for m in TRADEOFF_AXES)
            versus[policy] = {
                "point": list(theirs),
                "default_dominates": _dominates(default, theirs),
                "dominating_settings": sorted(k for k, pt in points.items() if _dominates(pt, theirs)),
            }
        out[lk] = {
            "default": list(default),
            "points": {k: list(v) for k, v in points.items()},
            "versus": versus,
        }
    return out


def _dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    return all(x < y for x, y in zip(a, b, strict=True))
