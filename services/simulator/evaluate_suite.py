"""The robustness suite's aggregation and report: every regime on its own, then the worst case.

Per regime and policy: mean, sample std, min and max over the split's seeds of the headline
metrics; the reference policy's ratio to the baseline (ratio of the means, with the per-seed
ratios' range, paired by seed); what the regime's workload offered in the scored window. The
worst case over regimes is the worst regime mean per policy and metric (highest for a cost,
lowest for spot work done) and the worst reference / baseline ratio, each with its regime named.
A default that looks good on average but fails one regime shows up there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gfs.services.simulator.evaluate_config import EvaluateConfig
from gfs.services.simulator.evaluate_metrics import REPORT_METRICS, spread

# (metric, label, scale, format, better): the report's columns, in the order.
SUITE_METRICS: tuple[tuple[str, str, float, str, str], ...] = (
    ("lp_eviction_rate_in_window", "LP eviction rate (window)", 1.0, "{:.4f}", "lower"),
    ("lp_queue_delay_mean_s", "LP queueing mean (h)", 1 / 3600, "{:.2f}", "lower"),
    ("lp_gpu_hours_completed_in_window", "spot GPU-h done (window)", 1.0, "{:,.0f}", "higher"),
    ("hp_queue_delay_mean_s", "HP queueing mean (h)", 1 / 3600, "{:.2f}", "lower"),
    # Issue 35: GPU-hours idle in the window while queued work would fit (core/work_conservation.py).
    ("idle_fit_gpu_hours", "idle while work fits (GPU-h)", 1.0, "{:,.0f}", "lower"),
)
# Issue 35's bars, on the reference / baseline ratio of the means: "never worse than FIFO for
# anyone" (each metric's limit), and the paper's margins (LP eviction and LP queueing at once).
NEVER_WORSE: tuple[tuple[str, str, float], ...] = (
    ("lp_eviction_rate_in_window", "le", 1.0),
    ("lp_queue_delay_mean_s", "le", 1.0),
    ("lp_gpu_hours_completed_in_window", "ge", 0.95),
    ("hp_queue_delay_mean_s", "le", 1.05),
)
PAPER_MARGINS: tuple[tuple[str, str, float], ...] = (
    ("lp_eviction_rate_in_window", "le", 0.67),
    ("lp_queue_delay_mean_s", "le", 0.56),
)
IDLE_BAR: tuple[str, str, float] = ("idle_fit_gpu_hours", "le", 1.0)
WORKLOAD_FIELDS = ("hp_load_window", "spot_load_window", "gpus", "pools")


def ratio(ours: float, theirs: float) -> float:
    """ours / theirs; nan when both are 0 (no difference to express), inf when only theirs is."""
    if theirs == 0:
        return math.nan if ours == 0 else math.inf
    return ours / theirs


def _finite_spread(values: Sequence[float]) -> dict[str, float]:
    """spread() over the finite values (a seed whose baseline is 0 has no finite ratio)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return {"mean": math.nan, "std": math.nan, "min": math.nan, "max": math.nan, "n": 0.0}
    return spread(finite)


def suite_aggregate(cfg: EvaluateConfig, results: Sequence[dict[str, Any]], split: str) -> dict[str, Any]:
    """`results` carry derived metrics (evaluate.with_derived); only `split`'s seeds count."""
    seeds = set(cfg.split_seeds(split))
    cells = [r for r in results if r["cell"]["study"] == "regime" and r["cell"]["seed"] in seeds]
    ref, base = cfg.reference, cfg.baseline
    regimes: dict[str, Any] = {}
    for regime in cfg.regimes:
        mine = [r for r in cells if r["cell"].get("regime") == regime.name]
        if not mine:
            continue
        table: dict[str, Any] = {}
        for policy in cfg.policies:
            rs = [r for r in mine if r["cell"]["policy"] == policy]
            if rs:
                table[policy] = {m: spread([r["metrics"][m] for r in rs]) for m in REPORT_METRICS}
        # Workload figures are the same for every policy of a seed: one value per seed.
        by_seed = {r["cell"]["seed"]: r for r in mine if "workload" in r}
        workload = {
            f: spread([float(r["workload"][f]) for r in by_seed.values()]) for f in WORKLOAD_FIELDS
        } if by_seed else {}  # fmt: skip
        jobs = spread([float(r["jobs"]) for r in by_seed.values()]) if by_seed else {}
        ratios: dict[str, Any] = {}
        if ref in table and base in table:
            theirs = {r["cell"]["seed"]: r for r in mine if r["cell"]["policy"] == base}
            paired = [(r, theirs[r["cell"]["seed"]]) for r in mine
                      if r["cell"]["policy"] == ref and r["cell"]["seed"] in theirs]  # fmt: skip
            for m, *_ in SUITE_METRICS:
                per_seed = _finite_spread([ratio(a["metrics"][m], b["metrics"][m]) for a, b in paired])
                ratios[m] = {
                    "of_means": ratio(table[ref][m]["mean"], table[base][m]["mean"]),
                    "per_seed": per_seed,
                }
        regimes[regime.name] = {"table": table, "workload": workload, "jobs": jobs, "ratio": ratios}
    return {
        "split": split,
        "seeds": sorted(seeds),
        "regimes": regimes,
        "worst": _worst(cfg, regimes),
    }


def _meets(ratios: dict[str, Any], bars: Sequence[tuple[str, str, float]]) -> bool | None:
    """Does every bar hold on the ratio of the means? None when a ratio is missing. A ratio of
    n/a (both 0) holds every bar; inf (only the baseline 0) fails a cost bar."""
    ok = True
    for metric, how, limit in bars:
        r = ratios.get(metric)
        if r is None:
            return None
        v = r["of_means"]
        if math.isnan(v):
            continue
        ok &= v <= limit + 1e-9 if how == "le" else v >= limit - 1e-9
    return ok


def _worse(better: str, a: float, b: float) -> bool:
    """Is a worse than b? nan is never worse (no information); inf is the worst cost ratio."""
    if math.isnan(a):
        return False
    if math.isnan(b):
        return True
    return a > b if better == "lower" else a < b


def _worst(cfg: EvaluateConfig, regimes: dict[str, Any]) -> dict[str, Any]:
    policies: dict[str, Any] = {}
    for policy in cfg.policies:
        row: dict[str, Any] = {}
        for m, _, _, _, better in SUITE_METRICS:
            best_name, best_value = "", math.nan
            for name, reg in regimes.items():
                value = reg["table"].get(policy, {}).get(m, {}).get("mean", math.nan)
                if best_name == "" or _worse(better, value, best_value):
                    best_name, best_value = name, value
            if best_name:
                row[m] = {"value": best_value, "regime": best_name}
        if row:
            policies[policy] = row
    ratios: dict[str, Any] = {}
    for m, _, _, _, better in SUITE_METRICS:
        best_name, best_value = "", math.nan
        for name, reg in regimes.items():
            value = reg["ratio"].get(m, {}).get("of_means", math.nan)
            if best_name == "" or _worse(better, value, best_value):
                best_name, best_value = name, value
        if best_name:
            ratios[m] = {"value": best_value, "regime": best_name}
    return {"policies": policies, "ratio": ratios}


# ----- Markdown ---------------------------------------------------------------------------------
def _cell(s: dict[str, float], scale: float, fmt: str) -> str:
    if not s or math.isnan(s["mean"]):
        return "n/a"
    mean = fmt.format(s["mean"] * scale)
    if s["n"] <= 1:
        return mean
    std, lo, hi = (fmt.format(s[k] * scale) for k in ("std", "min", "max"))
    return f"{mean} ± {std} [{lo}, {hi}]"


def _ratio_text(value: float) -> str:
    if math.isnan(value):
        return "n/a (both 0)"
    if math.isinf(value):
        return "inf (baseline 0)"
    return f"{value:.2f}"


def _ratio_cell(r: dict[str, Any]) -> str:
    text = _ratio_text(r["of_means"])
    per = r["per_seed"]
    if per["n"] > 1:
        text += f" [{per['min']:.2f}, {per['max']:.2f}]"
    return text


def _header(first: str) -> list[str]:
    return [
        "| " + " | ".join([first, *(c[1] for c in SUITE_METRICS)]) + " |",
        "|---" * (len(SUITE_METRICS) + 1) + "|",
    ]


def _regime_line(cfg: EvaluateConfig, name: str, agg: dict[str, Any]) -> str:
    r = cfg.regime(name)
    w = agg.get("workload") or {}
    gpus = f"{w['gpus']['mean']:,.0f}" if w else "?"
    pools = ", ".join(r.pools) if r.pools else "all"
    offered = _cell(w["hp_load_window"], 1.0, "{:.2f}") if w else "n/a"
    spot = _cell(w["spot_load_window"], 1.0, "{:.3f}") if w else "n/a"
    jobs = _cell(agg["jobs"], 1.0, "{:,.0f}") if agg.get("jobs") else "n/a"
    cluster = f"{gpus} ({pools}; node fraction {r.node_fraction:g})"
    return f"| `{name}` | {r.generator} | {r.load:g} | {cluster} | {offered} | {spot} | {jobs} | {r.note} |"


def suite_markdown(cfg: EvaluateConfig, report: dict[str, Any]) -> str:
    suite = report["aggregate"].get("suite") or {}
    split = suite.get("split", "test")
    ref, base = cfg.reference, cfg.baseline
    lines = [
        f"# Robustness suite: {cfg.name} ({split} seeds)",
        "",
        f"- config sha256: `{report['header']['config_sha256']}`",
        f"- rerun: `gfs evaluate --config config.frozen.json --out DIR --split {split}` (same numbers)",
        f"- cells finished: {report['header'].get('cells_finished', 'all')}",
        f"- policies: {', '.join(cfg.policies)}; ratio row: {ref} / {base}",
        f"- seeds: dev {list(cfg.dev_seeds)} (for choosing defaults), test {list(cfg.test_seeds)} "
        f"(for reporting); this report: **{split}** {suite.get('seeds', [])}",
        f"- nodes: {cfg.nodes}; forecast {cfg.forecast}; "
        f"window {cfg.window_days} d + drain {cfg.drain_days} d",
        f"- wall time: {report['timing']['grid_wall_s']:.0f} s with {cfg.workers} worker processes"
        + (" (estimated: sum of cell times / workers)" if report["timing"].get("wall_is_estimate") else ""),
        "",
        "Cells: mean ± sample std [min, max] over the seeds. Ratios: ratio of the means "
        "[min, max of the per-seed ratios, paired by seed]; below 1 is better for the reference on "
        "every column but spot GPU-h done, where above 1 is better.",
        "",
        "## Regimes",
        "",
        "Offered loads are requested GPU-time in the scored window as if every job started on "
        "submission, over the cluster's GPUs (the same for every policy).",
        "",
        "| regime | generator | HP load (nominal) | GPUs (pools) | offered HP load (window) | "
        "offered spot load (window) | jobs | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    regimes = suite.get("regimes", {})
    lines += [_regime_line(cfg, name, agg) for name, agg in regimes.items()]
    for name, agg in regimes.items():
        r = cfg.regime(name)
        lines += ["", f"## Regime `{name}`: {r.generator}, HP load {r.load:g}", "", *_header("policy")]
        for policy in cfg.policies:
            row = agg["table"].get(policy)
            if row:
                cells = [_cell(row[m], sc, f) for m, _, sc, f, _ in SUITE_METRICS]
                lines.append(f"| {policy} | " + " | ".join(cells) + " |")
        if agg["ratio"]:
            cells = [_ratio_cell(agg["ratio"][m]) for m, *_ in SUITE_METRICS]
            lines.append(f"| **{ref} / {base}** | " + " | ".join(cells) + " |")
    worst = suite.get("worst") or {}
    if worst.get("policies"):
        lines += [
            "",
            "## Worst case over regimes",
            "",
            "Per policy, the worst regime mean of each metric (highest cost, least spot work), with "
            f"the regime; last row, the worst {ref} / {base} ratio of means.",
            "",
            *_header("policy"),
        ]
        for policy, row in worst["policies"].items():
            cells = []
            for m, _, sc, f, _ in SUITE_METRICS:
                v = row.get(m)
                cells.append("n/a" if v is None or math.isnan(v["value"])
                             else f"{f.format(v['value'] * sc)} (`{v['regime']}`)")  # fmt: skip
            lines.append(f"| {policy} | " + " | ".join(cells) + " |")
        cells = []
        for m, *_ in SUITE_METRICS:
            v = worst["ratio"].get(m)
            cells.append("n/a" if v is None else f"{_ratio_text(v['value'])} (`{v['regime']}`)")
        lines.append(f"| **{ref} / {base}** | " + " | ".join(cells) + " |")
    lines += _targets(regimes, ref, base)
    lines += ["", "Plot: regimes.png (per regime, LP eviction rate in the window against LP queueing).", ""]
    return "\n".join(lines)


def _targets(regimes: dict[str, Any], ref: str, base: str) -> list[str]:
    """Issue 35's bars per regime, on the ratios of the means."""
    rows = [(name, agg["ratio"]) for name, agg in regimes.items() if agg["ratio"]]
    if not rows:
        return []
    never = "LP eviction <= 1.0, LP queueing <= 1.0, spot GPU-h >= 0.95, HP queueing <= 1.05"
    lines = [
        "",
        f"## Against the targets ({ref} / {base}, ratio of the means)",
        "",
        f"- never worse for anyone: {never};",
        "- the paper's margins: LP eviction <= 0.67 and LP queueing <= 0.56 at once;",
        "- idle while work fits: <= 1.0.",
        "",
        "| regime | never worse | paper's margins | idle while work fits |",
        "|---|---|---|---|",
    ]
    counts = [0, 0, 0]
    for name, ratios in rows:
        marks = [_meets(ratios, NEVER_WORSE), _meets(ratios, PAPER_MARGINS), _meets(ratios, (IDLE_BAR,))]
        for i, m in enumerate(marks):
            counts[i] += bool(m)
        lines.append(f"| `{name}` | " + " | ".join("n/a" if m is None else ("yes" if m else "**no**")
                                                   for m in marks) + " |")  # fmt: skip
    n = len(rows)
    lines.append(f"| **regimes meeting it** | {counts[0]} of {n} | {counts[1]} of {n} | {counts[2]} of {n} |")
    return lines


def plot_suite(out: Path, cfg: EvaluateConfig, report: dict[str, Any]) -> None:
    """One panel per regime: every policy as a point of LP queueing (x) and LP eviction rate (y)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    regimes = (report["aggregate"].get("suite") or {}).get("regimes", {})
    names = list(regimes) or ["(no cells)"]
    cols = min(4, len(names))
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.8 * rows), squeeze=False)
    markers = "os^Dv<>P*Xh"
    for ax, name in zip(axes.flat, names, strict=False):
        table = regimes.get(name, {}).get("table", {})
        for i, policy in enumerate(cfg.policies):
            row = table.get(policy)
            if row:
                x = row["lp_queue_delay_mean_s"]["mean"] / 3600
                y = row["lp_eviction_rate_in_window"]["mean"]
                ax.plot([x], [y], marker=markers[i % len(markers)], linestyle="", label=policy)
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_yscale("symlog", linthresh=1e-4)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("LP queueing mean (h)", fontsize=8)
        ax.set_ylabel("LP eviction rate (window)", fontsize=8)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "regimes.png", dpi=100)
    plt.close(fig)
