"""The evaluation report: JSON (everything, numbers only), Markdown tables and PNG plots.

report.json holds the frozen config, its hash and every cell's numbers; wall times are kept apart
(`timing`) so two runs of the same frozen config produce byte-identical `results`/`aggregate`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from gfs.services.simulator.evaluate_config import EvaluateConfig
from gfs.services.simulator.evaluate_metrics import REPORT_METRICS
from gfs.services.simulator.evaluate_suite import plot_suite, suite_markdown

# The in-window measure leads (docs/decisions.md, "In-window measure"); the drain-inclusive
# figures stay as the last two columns so reports written before it remain comparable.
HEADLINE = (
    ("lp_eviction_rate_in_window", "LP eviction rate (window)", 1.0, "{:.4f}"),
    ("lp_evictions_per_kgpuh_in_window", "evictions per 1k spot GPU-h (window)", 1.0, "{:.2f}"),
    ("lp_queue_delay_mean_s", "LP queueing delay (h)", 1 / 3600, "{:.2f}"),
    ("hp_queue_delay_mean_s", "HP queueing delay (h)", 1 / 3600, "{:.2f}"),
    ("gpu_allocation_rate", "GPU allocation", 1.0, "{:.4f}"),
    ("lp_eviction_rate", "LP eviction rate (incl. drain)", 1.0, "{:.4f}"),
    ("lp_evictions_per_kgpuh", "evictions per 1k spot GPU-h (incl. drain)", 1.0, "{:.2f}"),
)
SWEEP_LABELS = (("p", "guarantee rate p"), ("hours", "guarantee hours H"), ("target", "target eviction rate"))


def build_report(
    cfg: EvaluateConfig, results: list[dict[str, Any]], agg: dict[str, Any], wall_s: float
) -> dict[str, Any]:
    header: dict[str, Any] = {"config": cfg.to_dict(), "config_sha256": cfg.digest()}
    if cfg.is_suite:
        header["split"] = agg["suite"]["split"]
    return {
        "header": header,
        "results": [{k: v for k, v in r.items() if k != "wall_s"} for r in results],
        "aggregate": agg,
        "timing": {"grid_wall_s": wall_s, "cells": {r["key"]: r["wall_s"] for r in results}},
    }


def write_report(out: Path, report: dict[str, Any], cfg: EvaluateConfig) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.frozen.json").write_text(json.dumps(cfg.to_dict(), indent=2, sort_keys=True) + "\n")
    (out / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True, allow_nan=True) + "\n")
    (out / "report.md").write_text(markdown(cfg, report))
    plot_all(out, cfg, report)


def _cell(s: dict[str, float], scale: float, fmt: str) -> str:
    mean = fmt.format(s["mean"] * scale)
    if s["n"] <= 1:
        return mean
    std, lo, hi = (fmt.format(s[k] * scale) for k in ("std", "min", "max"))
    return f"{mean} ± {std} [{lo}, {hi}]"


def _pct(s: dict[str, float]) -> str:
    if any(math.isnan(s[k]) for k in ("mean", "std")):
        return "n/a (baseline 0)"
    text = f"{s['mean']:+.1f}%"
    if s["n"] > 1:
        text += f" ± {s['std']:.1f} [{s['min']:+.1f}, {s['max']:+.1f}]"
    return text


def _headline_header(first: str) -> list[str]:
    """Header and rule of a table whose columns are the HEADLINE metrics after `first`."""
    return ["| " + " | ".join([first, *(h[1] for h in HEADLINE)]) + " |", "|---" * (len(HEADLINE) + 1) + "|"]


def markdown(cfg: EvaluateConfig, report: dict[str, Any]) -> str:
    if cfg.is_suite:  # a suite has no grid: its own report, every regime separately
        return suite_markdown(cfg, report)
    agg = report["aggregate"]
    lines = [
        f"# Evaluation report: {cfg.name}",
        "",
        f"- config sha256: `{report['header']['config_sha256']}`",
        "- rerun: `gfs evaluate --config config.frozen.json --out DIR` (same numbers)",
        f"- cells finished: {report['header'].get('cells_finished', 'all')}",
        f"- policies: {', '.join(cfg.policies)}; seeds {list(cfg.seeds)}; HP load levels {list(cfg.loads)}",
        f"- cluster: {cfg.nodes} x node_fraction {cfg.node_fraction}; generator days "
        f"{cfg.generator.get('days')} scale {cfg.generator.get('scale')}; forecast {cfg.forecast}; "
        f"window {cfg.window_days} d + drain {cfg.drain_days} d",
        f"- grid wall time: {report['timing']['grid_wall_s']:.0f} s with {cfg.workers} worker processes"
        + (" (estimated: sum of cell times / workers)" if report["timing"].get("wall_is_estimate") else ""),
        "",
        "Cells show mean ± sample std [min, max] over seeds.",
        "",
    ]
    for load in cfg.loads:
        lines += [
            f"## HP load {load:g}",
            "",
            *_headline_header("policy"),
        ]
        for p in cfg.policies:
            row = agg["table"].get(f"{p}|{load:g}")
            if row:
                lines.append(
                    f"| {p} | " + " | ".join(_cell(row[m], sc, f) for m, _, sc, f in HEADLINE) + " |"
                )
        lines += [
            "",
            f"Change of {cfg.reference} against each policy (paired by seed, percent of the other's value):",
            "",
            *_headline_header("vs"),
        ]
        for p in cfg.policies:
            ch = agg["change_vs_reference"].get(f"{p}|{load:g}")
            if ch:
                lines.append(f"| {p} | " + " | ".join(_pct(ch[m]) for m, *_ in HEADLINE) + " |")
        lines.append("")
    lines += [
        "## Every metric (mean ± std over seeds)",
        "",
        "| policy | load | " + " | ".join(REPORT_METRICS) + " |",
        "|---" * (len(REPORT_METRICS) + 2) + "|",
    ]
    for key, row in agg["table"].items():
        p, load = key.split("|")
        lines.append(
            f"| {p} | {load} | "
            + " | ".join(f"{row[m]['mean']:.4g} ± {row[m]['std']:.2g}" for m in REPORT_METRICS)
            + " |"
        )
    lines += _tradeoff_lines(cfg, agg)
    policy = cfg.sensitivity.policy if cfg.sensitivity else "gfs"
    for study, label in SWEEP_LABELS:
        for load, rows in (agg["sensitivity"].get(study) or {}).items():
            lines += [
                "",
                f"## Sensitivity of {policy} to {label} (HP load {load})",
                "",
                *_headline_header(label),
            ]
            for v, row in rows.items():
                lines.append(
                    f"| {v} | " + " | ".join(_cell(row[m], sc, f) for m, _, sc, f in HEADLINE) + " |"
                )
    lines += ["", "Plots: tradeoff.png, pools.png, sensitivity.png.", ""]
    return "\n".join(lines)


def _tradeoff_lines(cfg: EvaluateConfig, agg: dict[str, Any]) -> list[str]:
    """Whether the swept policy dominates each other policy (lower LP eviction rate in the window
    and lower LP queueing delay, means over seeds), at its default and at any swept setting."""
    rows = agg.get("tradeoff") or {}
    if not rows or cfg.sensitivity is None:
        return []
    ours = cfg.sensitivity.policy
    lines = [
        "",
        f"## Trade-off: does {ours} dominate? (lower LP eviction rate in the window and lower LP queueing)",
        "",
        "| HP load | policy | its eviction rate | its LP queueing (h) | "
        f"{ours} default dominates | settings of {ours} that dominate |",
        "|---|---|---|---|---|---|",
    ]
    for load, row in rows.items():
        for policy, v in row["versus"].items():
            rate, wait = v["point"]
            settings = ", ".join(v["dominating_settings"]) or "none"
            lines.append(
                f"| {load} | {policy} | {rate:.4f} | {wait / 3600:.2f} | "
                f"{'yes' if v['default_dominates'] else 'no'} | {settings} |"
            )
    return lines


def plot_all(out: Path, cfg: EvaluateConfig, report: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if cfg.is_suite:
        plot_suite(out, cfg, report)
        return
    agg = report["aggregate"]
    # 1. Trade-off per HP load: the swept policy's settings as a curve, every policy as a point.
    loads = list(cfg.loads)
    fig, axes = plt.subplots(1, len(loads), figsize=(5.5 * len(loads), 4.5), squeeze=False)
    markers = "os^Dv<>P*Xh"
    for ax, load in zip(axes[0], loads, strict=True):
        for i, p in enumerate(cfg.policies):
            row = agg["table"].get(f"{p}|{load:g}")
            if row:
                x, y = row["lp_queue_delay_mean_s"]["mean"] / 3600, row["lp_eviction_rate_in_window"]["mean"]
                ax.plot([x], [y], marker=markers[i % len(markers)], linestyle="", label=p)
        curve = (agg.get("tradeoff") or {}).get(f"{load:g}", {}).get("points", {})
        p_points = sorted((float(k[2:]), v) for k, v in curve.items() if k.startswith("p="))
        if p_points:
            ax.plot(
                [v[1] / 3600 for _, v in p_points], [v[0] for _, v in p_points], "k--", lw=1, label="p sweep"
            )
            for r, v in p_points:
                ax.annotate(f"p={r:g}", (v[1] / 3600, v[0]), fontsize=6)
        targets = [v for k, v in curve.items() if k.startswith("target=")]
        if targets:
            ax.plot([v[1] / 3600 for v in targets], [v[0] for v in targets], "kx", label="target sweep")
        # Log scales: the policies differ by orders of magnitude in both (symlog keeps zeros,
        # which a tiny grid with no eviction at all has).
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_yscale("symlog", linthresh=1e-4)
        ax.set_xlabel("mean LP queueing delay (h)")
        ax.set_ylabel("LP eviction rate (in window)")
        ax.set_title(f"HP load {load:g}")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "tradeoff.png", dpi=110)
    plt.close(fig)
    # 2. Per-pool breakdown at the highest load.
    load = max(cfg.loads)
    pools = sorted({pool for p in cfg.policies for pool in agg["pools"].get(f"{p}|{load:g}", {})})
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / max(1, len(cfg.policies))
    for j, (metric, label) in enumerate(
        (("lp_eviction_rate", "LP eviction rate"), ("gpu_allocation_rate", "GPU allocation"))
    ):
        for i, p in enumerate(cfg.policies):
            per = agg["pools"].get(f"{p}|{load:g}", {})
            vals = [per.get(pool, {}).get(metric, {"mean": 0.0})["mean"] for pool in pools]
            axes[j].bar([k + i * width for k in range(len(pools))], vals, width, label=p)
        axes[j].set_xticks([k + 0.4 - width / 2 for k in range(len(pools))], pools, rotation=20, fontsize=7)
        axes[j].set_title(f"{label} per pool (HP load {load:g})")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "pools.png", dpi=110)
    plt.close(fig)
    # 3. Sensitivity: one panel per sweep, one line per HP load.
    fig, axes = plt.subplots(1, len(SWEEP_LABELS), figsize=(5 * len(SWEEP_LABELS), 4))
    for ax, (study, label) in zip(axes, SWEEP_LABELS, strict=True):
        for load, rows in (agg["sensitivity"].get(study) or {}).items():
            xs = [float(v) for v in rows]
            ax.plot(
                xs,
                [rows[v]["lp_eviction_rate_in_window"]["mean"] for v in rows],
                marker="o",
                label=f"load {load}",
            )
        ax.set_xlabel(label)
        ax.set_ylabel("LP eviction rate (in window)")
        ax.set_title(f"sensitivity to {label}")
        if ax.lines:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "sensitivity.png", dpi=110)
    plt.close(fig)
