"""`gfs bench warnings`: what early reclaim warnings save, per robustness-suite regime.

Each cell (regime x seed) runs the policy once with every warning setting attached: warnings change
no decision (core/reclaim_warning.py), so all settings are scored on exactly the same evictions.
Per setting: lost spot GPU-hours with and without warnings, the cut, the cut net of what the
warnings' checkpoints cost (an assumed `checkpoint_cost_s` per warning), warnings sent, recall (the
share of evictions whose victim was warned in that run) and precision (the share of warnings
followed by the task's eviction within the lead time). Settings are chosen on the suite's dev
seeds by their worst regime and reported on its test seeds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from gfs.services.core.reclaim_warning import WarningSettings
from gfs.services.simulator.evaluate import Cell, cell_simulation, spread
from gfs.services.simulator.evaluate_config import EvaluateConfig
from gfs.services.simulator.reclaim_warnings import WarningLedger


def run_warning_cell(
    cfg: EvaluateConfig, policy: str, regime: str, seed: int, variants: Sequence[WarningSettings]
) -> dict[str, Any]:
    cell = Cell("regime", policy, seed, cfg.regime(regime).load, regime=regime)
    sim, _, _ = cell_simulation(cfg, cell)
    ledgers = tuple(WarningLedger(v) for v in variants)
    sim.warnings = ledgers
    sim.run()
    summaries = [ledger.summary() for ledger in ledgers]
    return {"regime": regime, "seed": seed, "policy": policy, "variants": summaries}


def run_warning_grid(
    cfg: EvaluateConfig, policy: str, seeds: Sequence[int], variants: Sequence[WarningSettings], workers: int
) -> list[dict[str, Any]]:
    jobs = [(r.name, s) for s in seeds for r in cfg.regimes]
    if workers <= 1:
        return [run_warning_cell(cfg, policy, r, s, variants) for r, s in jobs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(run_warning_cell, cfg, policy, r, s, variants) for r, s in jobs]
        return [f.result() for f in futures]


def aggregate(results: Sequence[dict[str, Any]], n_variants: int) -> dict[str, Any]:
    """Per variant: per regime, the cut in lost GPU-hours summed over seeds and its per-seed spread;
    the worst regime."""
    out: dict[str, Any] = {"variants": []}
    regimes = sorted({r["regime"] for r in results})
    for i in range(n_variants):
        per_regime: dict[str, Any] = {}
        for regime in regimes:
            rows = [r["variants"][i] for r in results if r["regime"] == regime]
            lost = sum(v["lost_gpu_h"] for v in rows)
            warned = sum(v["lost_gpu_h_warned"] for v in rows)
            cuts = [v["lost_cut"] for v in rows if not math.isnan(v["lost_cut"])]
            evictions = sum(v["evictions"] for v in rows)
            warnings = sum(v["warnings"] for v in rows)
            cost = sum(v["checkpoint_gpu_h"] for v in rows)
            per_regime[regime] = {
                "evictions": evictions,
                "lost_gpu_h": lost,
                "lost_gpu_h_warned": warned,
                "cut": 1.0 - warned / lost if lost > 0 else math.nan,
                "checkpoint_gpu_h": cost,
                "net_cut": 1.0 - (warned + cost) / lost if lost > 0 else math.nan,
                "cut_per_seed": spread(cuts) if cuts else None,
                "warnings": warnings,
                "recall": sum(v["warned_evictions"] for v in rows) / evictions if evictions else math.nan,
                "precision": _precision(rows),
            }
        finite = [(v["net_cut"], k) for k, v in per_regime.items() if not math.isnan(v["net_cut"])]
        worst = min(finite) if finite else (math.nan, "")
        total_lost = sum(v["lost_gpu_h"] for v in per_regime.values())
        total_warned = sum(v["lost_gpu_h_warned"] for v in per_regime.values())
        total_cost = sum(v["checkpoint_gpu_h"] for v in per_regime.values())
        out["variants"].append(
            {
                "regimes": per_regime,
                "worst_net_cut": worst[0],
                "worst_regime": worst[1],
                "overall_cut": 1.0 - total_warned / total_lost if total_lost > 0 else math.nan,
                "overall_net_cut": 1.0 - (total_warned + total_cost) / total_lost
                if total_lost > 0
                else math.nan,
                "warnings": sum(v["warnings"] for v in per_regime.values()),
            }
        )
    return out


def _precision(rows: Sequence[dict[str, float]]) -> float:
    hits = sum(v["precision"] * v["warnings"] for v in rows if v["warnings"])
    sent = sum(v["warnings"] for v in rows)
    return hits / sent if sent else math.nan


def render(
    agg: dict[str, Any], variants: Sequence[WarningSettings], policy: str, split: str, seeds: Sequence[int]
) -> str:
    lines = [f"# Early reclaim warnings: {policy}, {split} seeds {list(seeds)}", ""]
    lines.append(
        "Lost spot GPU-hours at evictions (work since the last checkpoint), without and with a "
        "checkpoint on each warning, on the same evictions (warnings change no decision)."
    )
    for v, a in zip(variants, agg["variants"], strict=True):
        lines += [
            "",
            f"## lead {v.lead_s:g} s, quantile {v.quantile:g}, margin {v.margin:g}, checkpoint "
            f"{v.checkpoint_cost_s:g} s: cut {_pct(a['overall_cut'])}, net of checkpoints "
            f"{_pct(a['overall_net_cut'])}, worst regime (net) {a['worst_regime']} "
            f"{_pct(a['worst_net_cut'])}, {a['warnings']:,.0f} warnings",
            "",
            "| regime | evictions | lost GPU-h | with warnings | cut | cut per seed (min-max) "
            "| checkpoints GPU-h | net cut | warnings | recall | precision |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for name, r in a["regimes"].items():
            ps = r["cut_per_seed"]
            per_seed = f"{_pct(ps['min'])}-{_pct(ps['max'])}" if ps else "-"
            lines.append(
                f"| {name} | {r['evictions']:.0f} | {r['lost_gpu_h']:.1f} | {r['lost_gpu_h_warned']:.1f} | "
                f"{_pct(r['cut'])} | {per_seed} | {r['checkpoint_gpu_h']:.1f} | {_pct(r['net_cut'])} "
                f"| {r['warnings']:,.0f} | {_pct(r['recall'])} | {_pct(r['precision'])} |"
            )
    return "\n".join(lines) + "\n"


def _pct(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{100 * x:.0f}%"
