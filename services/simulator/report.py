"""Render a `SimulationResult`: a Markdown table comparing policies and PNG plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gfs.services.simulator.result import SimulationResult

TABLE_METRICS: tuple[tuple[str, str], ...] = (
    ("lp_eviction_rate", "{:.4f}"),
    ("lp_eviction_rate_in_window", "{:.4f}"),
    ("lp_evictions_per_kgpuh_in_window", "{:.3f}"),
    ("lp_queue_delay_mean_s", "{:.0f}"),
    ("lp_queue_delay_p99_s", "{:.0f}"),
    ("hp_queue_delay_mean_s", "{:.0f}"),
    ("hp_queue_delay_p99_s", "{:.0f}"),
    ("hp_slo_attainment", "{:.4f}"),
    ("gpu_allocation_rate", "{:.4f}"),
    ("useful_gpu_time_rate", "{:.4f}"),
    ("lp_gpu_hours_completed", "{:.1f}"),
    ("lp_jct_mean_s", "{:.0f}"),
    ("evictions", "{:.0f}"),
    ("tasks_finished", "{:.0f}"),
    ("tasks_unfinished", "{:.0f}"),
    ("tasks_cancelled", "{:.0f}"),
    ("sim_wall_s", "{:.1f}"),
    ("events", "{:.0f}"),
)


def markdown_table(result: SimulationResult) -> str:
    names = list(result.policies)
    lines = ["| metric | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for key, fmt in TABLE_METRICS:
        cells = [fmt.format(float(result.policies[n].metrics[key])) for n in names]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _pool_table(result: SimulationResult) -> str:
    names = list(result.policies)
    if not names:
        return ""
    pools = sorted(result.policies[names[0]].metrics["pools"])
    lines = ["| pool | metric | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for pool in pools:
        for key in (
            "lp_eviction_rate",
            "lp_queue_delay_mean_s",
            "hp_queue_delay_mean_s",
            "gpu_allocation_rate",
        ):
            cells = [f"{float(result.policies[n].metrics['pools'][pool][key]):.4g}" for n in names]
            lines.append(f"| {pool} | {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _save(fig: Any, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(result: SimulationResult, out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    settings = ", ".join(f"{k}={v}" for k, v in result.settings.items())
    md = [
        "# Simulation report",
        "",
        f"Trace: `{result.source}`",
        "",
        f"Settings: {settings}",
        "",
        "## Cluster-wide",
        "",
        markdown_table(result),
        "",
        "## Per pool",
        "",
        _pool_table(result),
        "",
        "## Plots",
        "",
        "![allocation](allocation.png)",
        "",
        "![quota](quota_vs_demand.png)",
        "",
        "![eviction rate](eviction_rate.png)",
        "",
        "![queue delay](queue_delay_cdf.png)",
        "",
    ]
    (out_dir / "report.md").write_text("\n".join(md))

    fig, ax = plt.subplots(figsize=(10, 4))
    for name, r in result.policies.items():
        s = r.series
        if len(s.times_s):
            total = (s.allocation * s.capacity).sum(axis=1) / s.capacity.sum()
            ax.plot(s.times_s / 86400.0, total, label=name, lw=0.8)
    ax.set_xlabel("day"), ax.set_ylabel("GPU allocation rate"), ax.legend()
    _save(fig, out_dir / "allocation.png")

    first = next(iter(result.policies.values()), None)
    pools = first.series.pools if first else ()
    fig, axes = plt.subplots(max(1, len(pools)), 1, figsize=(10, 2.2 * max(1, len(pools))), squeeze=False)
    for i, pool in enumerate(pools):
        ax = axes[i][0]
        for name, r in result.policies.items():
            s = r.series
            if len(s.times_s):
                ax.plot(s.times_s / 86400.0, s.quota[:, i], label=f"{name} quota", lw=0.8)
                ax.plot(s.times_s / 86400.0, s.spot_in_use[:, i], label=f"{name} spot used", lw=0.6, ls=":")
        if first is not None and len(first.series.times_s):
            s = first.series
            ax.plot(s.times_s / 86400.0, s.hp_demand[:, i], label="HP demand", color="k", lw=0.8)
            ax.axhline(s.capacity[i], color="grey", lw=0.5)
        ax.set_title(pool, fontsize=8), ax.legend(fontsize=6)
    _save(fig, out_dir / "quota_vs_demand.png")

    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / max(1, len(result.policies))
    x = np.arange(len(pools))
    for j, (name, r) in enumerate(result.policies.items()):
        rates = [r.metrics["pools"][p]["lp_eviction_rate"] for p in pools]
        ax.bar(x + j * width, rates, width, label=name)
    ax.set_xticks(x + width * (len(result.policies) - 1) / 2, pools, rotation=20, fontsize=7)
    ax.set_ylabel("LP eviction rate"), ax.legend()
    _save(fig, out_dir / "eviction_rate.png")

    fig, axes2 = plt.subplots(1, 2, figsize=(10, 4))
    for name, r in result.policies.items():
        for ax, data, title in ((axes2[0], r.series.lp_wait_s, "LP"), (axes2[1], r.series.hp_wait_s, "HP")):
            if len(data):
                xs = np.sort(data) / 3600.0
                ax.plot(xs, np.arange(1, len(xs) + 1) / len(xs), label=name)
            ax.set_title(f"{title} queueing delay CDF"), ax.set_xlabel("hours"), ax.set_xscale("symlog")
    axes2[0].legend()
    _save(fig, out_dir / "queue_delay_cdf.png")
