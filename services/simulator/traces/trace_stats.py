"""Key statistics of a GFS-format trace, side by side with the real trace's published values.

Targets come from shared/data/gfs-v2026/stats (file named in each row; CALIBRATION.md section in
brackets). They are the real trace's numbers, so on the real `job_info_df.csv` every row should
match; on a synthetic trace the gap is the generator's calibration error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gfs.services.simulator.traces.columns import JobColumns
from gfs.services.simulator.traces.records import TraceNode

HOUR_S = 3600.0
DAY_S = 86400.0


@dataclass(frozen=True, slots=True)
class StatRow:
    name: str
    generated: float
    target: float | None
    source: str
    unit: str = ""  # "%" values are stored as fractions and printed x100

    def text(self, value: float | None) -> str:
        if value is None:
            return "n/a"
        if self.unit == "%":
            return f"{100 * value:.2f} %"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.1f}"


def _mean(values: np.ndarray) -> float:
    """Mean, or NaN for an empty selection (a short trace may have no Spot jobs)."""
    return float(values.mean()) if values.size else float("nan")


def _q(values: np.ndarray, q: float) -> float:
    return float(np.quantile(values, q)) if values.size else float("nan")


def gini(values: np.ndarray) -> float:
    """Gini coefficient of non-negative values (0 = equal, -> 1 = one holder)."""
    v = np.sort(np.asarray(values, dtype=float))
    n = v.size
    if n == 0 or v.sum() == 0:
        return 0.0
    cum = np.cumsum(v)
    return float((n + 1 - 2 * (cum / cum[-1]).sum()) / n)


def _weekday_factors(daily: np.ndarray) -> np.ndarray:
    """Median over days of count / centred 7-day mean, per day mod 7 (section 2.2 method)."""
    ratios: list[list[float]] = [[] for _ in range(7)]
    for d in range(4, daily.size - 4):
        window = daily[d - 3 : d + 4].mean()
        if window > 0:
            ratios[d % 7].append(daily[d] / window)
    return np.array([np.median(r) if r else np.nan for r in ratios])


def compute_stats(cols: JobColumns, nodes: tuple[TraceNode, ...], horizon_s: float) -> list[StatRow]:
    rows: list[StatRow] = []

    def add(name: str, value: float, target: float | None, source: str, unit: str = "") -> None:
        rows.append(StatRow(name, float(value), target, source, unit))

    spot, hp = cols.is_spot, ~cols.is_spot
    gpus = cols.gpus
    gpu_s = gpus * cols.duration_s
    n = len(cols)
    add("jobs", n, 466867, "summary.txt [0]")
    add("HP jobs", hp.sum(), 415713, "job_type_summary.csv [1.1]")
    add("Spot jobs", spot.sum(), 51154, "job_type_summary.csv [1.1]")
    add("Spot job share", _mean(spot), 0.1096, "job_type_shares.csv [1.1]", "%")
    add("Spot GPU-s share", gpu_s[spot].sum() / gpu_s.sum(), 0.0243, "job_type_shares.csv [1.1]", "%")
    add("total GPU-s (B)", gpu_s.sum() / 1e9, 142.31, "job_type_summary.csv [1.1]")
    add("Spot GPU-s (B)", gpu_s[spot].sum() / 1e9, 3.453, "job_type_summary.csv [1.1]")
    for label, mask, t_multi, t_mean, t_frac, t_gpu in (
        ("HP", hp, 0.0557, 7.89, 0.1160, 2.00),
        ("Spot", spot, 0.3153, 11.11, 0.0198, 2.19),
    ):
        w = cols.workers[mask]
        add(f"{label} multi-worker share", _mean(w > 1), t_multi, "quick notebook [4.1]", "%")
        add(f"{label} mean workers (multi-worker jobs)", _mean(w[w > 1]), t_mean,
            "quick notebook [4.1]")  # fmt: skip
        g = cols.gpu_request[mask]
        add(f"{label} fractional gpu_request share", _mean(g < 1), t_frac, "quick notebook [3]", "%")
        add(f"{label} mean gpu_request", _mean(g), t_gpu, "quick notebook [3]")
    add("max workers", cols.workers.max(), 332, "worker_count_distribution.csv [4.2]")
    for label, mask, targets in (
        ("HP", hp, (205, 1101, 4009, 58770, 206521, 0.1450)),
        ("Spot", spot, (543, 2095.5, 8630, 21740, 13680, 0.1015)),
    ):
        d = cols.duration_s[mask]
        for q, t in zip((0.25, 0.5, 0.75, 0.9), targets[:4], strict=True):
            add(f"{label} duration p{int(q * 100)} (s)", _q(d, q), t, "job_type_summary.csv / notebook [6.1]")
        add(f"{label} duration mean (s)", _mean(d), targets[4], "job_type_summary.csv [6.1]")
        add(f"{label} share >= 6 h", _mean(d >= 6 * HOUR_S), targets[5], "long_job_slices_by_type.csv [1.1]",
            "%")  # fmt: skip
    d_all = cols.duration_s
    add("share of jobs < 10 min", (d_all < 600).mean(), 0.3703, "bucket_duration.csv [6.2]", "%")
    add("share of jobs < 1 h", (d_all < HOUR_S).mean(), 0.7194, "bucket_duration.csv [6.2]", "%")
    add("GPU-s share of jobs > 3 d", gpu_s[d_all > 3 * DAY_S].sum() / gpu_s.sum(), 0.7838,
        "bucket_duration.csv [6.2]", "%")  # fmt: skip
    _model_rows(cols, nodes, horizon_s, gpu_s, add)
    _time_rows(cols, horizon_s, gpu_s, add)
    _org_rows(cols, gpu_s, add)
    return rows


_MODEL_TARGETS: dict[str, tuple[float, float, float, float, float, float, float, float]] = {
    # spot share, mean demand, GPU-s share, time-avg/cap, HP median h, HP mean h, Spot median h, Spot mean h
    "A10": (0.0077, 0.92, 0.3712, 1.33, 0.11, 66.21, 1.33, 13.21),
    "A100-SXM4-80GB": (0.1871, 4.90, 0.2866, 0.74, 0.52, 25.32, 0.48, 3.44),
    "A800-SXM4-80GB": (0.4670, 6.13, 0.0133, 0.68, 0.39, 12.14, 0.39, 1.73),
    "GPU-series-1": (0.1511, 2.16, 0.1320, 0.76, 1.10, 315.42, 2.61, 3.87),
    "GPU-series-2": (0.2651, 14.56, 0.0728, 0.67, 0.37, 8.07, 1.42, 3.42),
    "H800": (0.2474, 65.02, 0.1242, 0.63, 0.26, 5.46, 0.32, 6.05),
}


def _model_rows(cols: JobColumns, nodes: tuple[TraceNode, ...], horizon_s: float, gpu_s: np.ndarray,
                add: Callable[..., None]) -> None:  # fmt: skip
    for m, model in enumerate(cols.models):
        t = _MODEL_TARGETS.get(model)
        mask = cols.model == m
        if t is None or not mask.any():
            continue
        cap = sum(node.gpus for node in nodes if node.gpu_model == model)
        src = "demand_by_model.csv + notebook [1.2]"
        add(f"{model}: Spot share of jobs", cols.is_spot[mask].mean(), t[0], src, "%")
        add(f"{model}: mean GPU demand / job", cols.gpus[mask].mean(), t[1], src)
        add(f"{model}: GPU-s share", gpu_s[mask].sum() / gpu_s.sum(), t[2], src, "%")
        if cap:
            add(f"{model}: time-avg demand / capacity", gpu_s[mask].sum() / horizon_s / cap, t[3],
                "hourly_concurrency.csv [8.1]")  # fmt: skip
        for label, kind, med, mean in (("HP", False, t[4], t[5]), ("Spot", True, t[6], t[7])):
            d = cols.duration_s[mask & (cols.is_spot == kind)] / HOUR_S
            if d.size:
                add(f"{model}: {label} duration median (h)", np.median(d), med, "quick notebook [6.3]")
                add(f"{model}: {label} duration mean (h)", d.mean(), mean, "quick notebook [6.3]")


def _time_rows(cols: JobColumns, horizon_s: float, gpu_s: np.ndarray, add: Callable[..., None]) -> None:
    at_zero = cols.submit_s == 0
    add("jobs at t = 0", at_zero.sum(), 3740, "hourly_summary.csv [0]")
    add("GPUs requested at t = 0", cols.gpus[at_zero].sum(), 6856, "hourly_concurrency.csv [0]")
    add("GPU-s share of t = 0 jobs", gpu_s[at_zero].sum() / gpu_s.sum(), 0.144, "hourly_summary.csv [0]", "%")
    n_hours = int(np.ceil(horizon_s / HOUR_S))
    hourly = np.bincount((cols.submit_s // HOUR_S).astype(np.int64), minlength=n_hours)[:n_hours]
    body = hourly[1:]
    add("jobs per hour, mean (hours >= 1)", body.mean(), 104.9, "hourly_summary.csv [2.4]")
    add("jobs per hour, Fano (hours >= 1)", body.var() / body.mean(), 62.1, "hourly_summary.csv [2.4]")
    add("jobs per hour, CV (hours >= 1)", body.std() / body.mean(), 0.77, "hourly_summary.csv [2.4]")
    for q, t in ((0.05, 28), (0.5, 89), (0.95, 226), (0.99, 499)):
        add(f"jobs per hour, p{int(q * 100)}", _q(body, q), t, "hourly_summary.csv [2.4]")
    hod = np.array([body[(np.arange(1, n_hours) % 24) == h].mean() for h in range(24)]) / body.mean()
    add("hour-of-day index, h 4 (trough)", hod[4], 0.67, "hour_of_day_patterns.csv [2.3]")
    add("hour-of-day index, h 16 (peak)", hod[16], 1.40, "hour_of_day_patterns.csv [2.3]")
    n_days = int(np.ceil(horizon_s / DAY_S))
    daily = np.bincount((cols.submit_s // DAY_S).astype(np.int64), minlength=n_days)[:n_days].astype(float)
    wd = _weekday_factors(daily)
    for weekday, factor in ((1, 0.78), (2, 0.73), (5, 1.12)):
        add(f"weekday factor, day mod 7 = {weekday}", wd[weekday], factor, "daily_summary.csv [2.2]")
    days = daily[1:]
    if days.size > 3:
        add("daily count lag-1 autocorrelation", np.corrcoef(days[:-1], days[1:])[0, 1], 0.79,
            "daily_summary.csv [2.1]")  # fmt: skip
    spot_daily = np.bincount((cols.submit_s[cols.is_spot] // DAY_S).astype(np.int64), minlength=n_days)
    add("Spot jobs on days 0-27", spot_daily[:28].sum(), 6, "daily_summary.csv [2.1]")
    gaps = np.diff(np.sort(cols.submit_s[cols.submit_s > 0]))
    for q, t in ((0.5, 16), (0.9, 86), (0.99, 252)):
        add(f"inter-arrival p{int(q * 100)} (s)", _q(gaps, q), t, "inter_arrival_quantiles.csv [2.5]")


def _org_rows(cols: JobColumns, gpu_s: np.ndarray, add: Callable[..., None]) -> None:
    n_orgs = len(cols.orgs)
    jobs = np.bincount(cols.org, minlength=n_orgs).astype(float)
    gs = np.bincount(cols.org, weights=gpu_s, minlength=n_orgs)
    add("organisations with jobs", (jobs > 0).sum(), 84, "org_by_gpu_seconds.csv [7.1]")
    add("Gini over orgs, GPU-s", gini(gs), 0.9117, "summary_extra.txt [7.1]")
    add("Gini over orgs, jobs", gini(jobs), 0.9335, "org_by_gpu_seconds.csv [7.1]")
    js, gss = np.sort(jobs)[::-1], np.sort(gs)[::-1]
    add("top-1 org share of jobs", js[0] / js.sum(), 0.388, "org_by_gpu_seconds.csv [7.1]", "%")
    add("top-5 org share of jobs", js[:5].sum() / js.sum(), 0.848, "org_by_gpu_seconds.csv [7.1]", "%")
    add("top-1 org share of GPU-s", gss[0] / gss.sum(), 0.322, "org_pareto_gpu_seconds.csv [7.1]", "%")
    add("top-5 org share of GPU-s", gss[:5].sum() / gss.sum(), 0.805, "org_pareto_gpu_seconds.csv [7.1]", "%")
    spot_by_org = np.bincount(cols.org[cols.is_spot], minlength=n_orgs)
    if spot_by_org.sum():
        add("largest org's share of Spot jobs", spot_by_org.max() / spot_by_org.sum(), 0.754,
            "quick notebook [7.2]", "%")  # fmt: skip


def format_table(rows: list[StatRow]) -> str:
    """A Markdown table: statistic | target | generated | source."""
    lines = ["| statistic | target | generated | source |", "| --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r.name} | {r.text(r.target)} | {r.text(r.generated)} | {r.source} |")
    return "\n".join(lines)
