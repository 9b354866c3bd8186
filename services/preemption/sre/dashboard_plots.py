"""The dashboard's plots (dashboard.py serves them): quota against forecast, evictions over time and
queue lengths per pool, each an SVG rendered with matplotlib (Agg) from `/dashboard/data`'s
JSON in a worker thread, one render at a time (`plots.PLOT_LOCK`: matplotlib is not thread-safe).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from gfs.services.preemption.sre.plots import PLOT_LOCK, figure, svg

MAX_POOLS_PLOTTED = 8


def _locked(render: Any, data: dict[str, Any]) -> bytes:
    with PLOT_LOCK:
        result: bytes = render(data)
        return result


def _empty(message: str) -> bytes:
    fig, (ax,) = figure(1, 1.2)
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=11, color="#555")
    return svg(fig)


def quota_svg(data: dict[str, Any]) -> bytes:
    """Per pool: capacity, the HP demand forecast (p-quantile and mean), the spare it leaves, and
    the spot quota in force per guarantee duration (steps at 1, 2, 4 h)."""
    pools = list(data["pools"].items())[:MAX_POOLS_PLOTTED]
    if not pools:
        return _empty("no pool owned by this instance")
    fig, axes = figure(len(pools))
    for ax, (name, p) in zip(axes, pools, strict=True):
        capacity = p["capacity_gpus"]
        quota = sorted((float(h), q) for h, q in p["quota_gpus"].items())
        hours = [h for h, _ in quota] or [1.0]
        forecast = p.get("forecast") or {}
        ahead = forecast.get("hours_ahead") or []
        if ahead:
            q = forecast["hp_demand_quantile"]
            ax.plot(
                ahead, q, "o-", color="#c0392b", label=f"HP demand forecast p{forecast.get('quantile', '')}"
            )
            ax.plot(
                ahead, forecast["hp_demand_mean"], ":", color="#c0392b", alpha=0.6, label="HP demand mean"
            )
            ax.fill_between(
                ahead,
                q,
                [capacity] * len(ahead),
                color="#27ae60",
                alpha=0.12,
                label="spare (capacity - forecast)",
            )
            hours = sorted(set(hours) | set(ahead))
        ax.axhline(capacity, color="#333", linestyle="--", linewidth=1, label=f"capacity {capacity}")
        why = p.get("why_spot_waits") or {}
        if why:  # the HP usage the quota protects at least, and the HP that waits beyond it
            ax.axhline(why["hp_placeable_gpus"], color="#8e44ad", linewidth=1.5,
                       label="HP floor (running + servable queued)")  # fmt: skip
            queued_all = why["hp_running_gpus"] + why["hp_queued_gpus"]
            if queued_all > why["hp_placeable_gpus"]:
                ax.axhline(queued_all, color="#8e44ad", linestyle=":", linewidth=1,
                           label="HP running + all queued")  # fmt: skip
        if quota:
            ax.step([h for h, _ in quota], [v for _, v in quota], where="post", color="#2471a3", linewidth=2,
                    label="spot quota in force")  # fmt: skip
            ax.plot([h for h, _ in quota], [v for _, v in quota], "s", color="#2471a3")
        ax.set_xlim(0, max(hours) + 0.5)
        ax.set_ylim(0, max(1.0, capacity * 1.1))
        version = p.get("quota_version") or "no quota yet"
        ax.set_title(f"{name}: quota against forecast ({version})", fontsize=9, loc="left")
        ax.set_xlabel("hours ahead / guarantee hours", fontsize=8)
        ax.set_ylabel("GPUs", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.legend(fontsize=7, loc="upper right")
    return svg(fig)


def evictions_svg(data: dict[str, Any]) -> bytes:
    ev = data["evictions"]
    by_pool: dict[str, dict[str, int]] = ev["by_pool"]
    if not by_pool:
        return _empty(f"no eviction in the last {ev['window_s'] / 3600:.3g} h")
    buckets = sorted({b for series in by_pool.values() for b in series})
    times = [datetime.fromisoformat(b) for b in buckets]
    width = timedelta(seconds=ev["bucket_s"] * 0.8)
    fig, (ax,) = figure(1, 3.0)
    bottom = [0] * len(buckets)
    for name, series in sorted(by_pool.items()):
        counts = [series.get(b, 0) for b in buckets]
        ax.bar(times, counts, width=width, bottom=bottom, align="edge", label=name)
        bottom = [a + b for a, b in zip(bottom, counts, strict=True)]
    ax.set_title(
        f"evictions per {ev['bucket_s'] // 60 or ev['bucket_s']} {'min' if ev['bucket_s'] >= 60 else 's'}"
        f" (last {ev['window_s'] / 3600:.3g} h, {ev['total']} in all)",
        fontsize=9,
        loc="left",
    )
    end = datetime.fromisoformat(ev["until"]) + timedelta(seconds=ev["bucket_s"])
    ax.set_xlim(
        min(times[0], end - timedelta(seconds=ev["window_s"])), end
    )  # the whole window, now on the right
    ax.set_ylabel("evictions", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.yaxis.get_major_locator().set_params(integer=True)
    fig.autofmt_xdate()
    ax.legend(fontsize=7)
    return svg(fig)


def queues_svg(data: dict[str, Any]) -> bytes:
    pools = list(data["pools"].items())[: MAX_POOLS_PLOTTED * 2]
    if not pools:
        return _empty("no pool owned by this instance")
    fig, (ax,) = figure(1, 0.5 + 0.45 * len(pools))
    names = [n for n, _ in pools]
    ys = list(range(len(names)))
    series = (("hp_running", "#c0392b", 1.0), ("hp_queued", "#c0392b", 0.45),
              ("spot_running", "#2471a3", 1.0), ("spot_queued", "#2471a3", 0.45))  # fmt: skip
    height = 0.8 / len(series)
    for i, (key, color, alpha) in enumerate(series):
        values = [p[key] for _, p in pools]
        ax.barh(
            [y + i * height for y in ys],
            values,
            height=height,
            color=color,
            alpha=alpha,
            label=key.replace("_", " "),
        )
    ax.set_yticks([y + 0.4 - height / 2 for y in ys], names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("tasks", fontsize=8)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title("tasks running and queued per pool and class", fontsize=9, loc="left")
    ax.legend(fontsize=7, loc="lower right")
    return svg(fig)
