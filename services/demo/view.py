"""The terminal view of `gfs demo live` (services/demo/live.py): what it polls from the services'
HTTP APIs per pool (`View`) and the rich table drawn from it every refresh."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from rich.console import Group
from rich.table import Table

from gfs.services.core.quota import QuotaSettings
from gfs.services.demo.clock import ClockState

TARGET = QuotaSettings().target  # the eviction rate the quota promises (1 - p = 0.1)


@dataclass(slots=True)
class View:
    started: float = field(default_factory=time.monotonic)
    first_decision_s: float | None = None
    pools: dict[str, Any] = field(default_factory=dict)
    quotas: dict[str, Any] = field(default_factory=dict)
    counts: dict[tuple[str, str], int] = field(default_factory=dict)  # (pool, kind) -> decisions
    replay_done: bool = False
    clock: ClockState | None = None  # the accelerated clock's progress (None on the wall clock)
    speed: float = 0.0
    # pool -> (failed, all) guarantee periods so far, from the quota service's ledger
    periods: dict[str, tuple[int, int]] = field(default_factory=dict)


async def _json(http: aiohttp.ClientSession, url: str) -> Any:
    try:
        async with http.get(url, timeout=aiohttp.ClientTimeout(total=2)) as response:
            return await response.json() if response.status == 200 else None
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
        return None


def _render(view: View, run: str, ports: dict[str, int]) -> Group:
    table = Table(title=f"GFS live demo {run}: {time.monotonic() - view.started:.0f} s", expand=True)
    for column in (
        "pool",
        "nodes (down)",
        "GPUs",
        "HP run/queue",
        "spot run/queue",
        "evictions",
        "spot quota 1h",
        "quota from",
        "HP forecast p90 1h",
        "eviction rate / target",
    ):
        table.add_column(column, justify="right")
    for name, p in sorted(view.pools.items()):
        q = view.quotas.get(name) or {}
        forecast = (q.get("forecast") or {}).get("p_quantile") or []
        failed, periods = view.periods.get(name, (0, 0))
        rate = f"{failed}/{periods} = {failed / periods:.3f}" if periods else "0/0"
        table.add_row(
            name,
            f"{p['nodes']} ({len(p['down'])})",
            str(p["capacity_gpus"]),
            f"{p['hp_running']}/{p['hp_queued']}",
            f"{p['spot_running']}/{p['spot_queued']}",
            str(view.counts.get((name, "evicted"), 0)),
            f"{p['quota_gpus'].get('1', 0):.0f}",
            _quota_source(q),
            f"{forecast[0]:.1f}" if forecast else "-",
            f"{rate} / {TARGET:.3f}",
        )
    first = "waiting" if view.first_decision_s is None else f"{view.first_decision_s:.1f} s after start"
    played = ""
    if view.clock is not None:
        at = view.clock.at_s
        played = (
            f"sample time day {int(at // 86400) + 1} {int(at % 86400 // 3600):02d}:"
            f"{int(at % 3600 // 60):02d} ({view.speed:g}x, {view.clock.submitted} submitted, "
            f"held {view.clock.held_s:.0f} s for the forecast); "
        )
    footer = (
        f"{played}first decision: {first}; replay {'done' if view.replay_done else 'running'}; "
        "Jaeger http://127.0.0.1:16686  Prometheus http://127.0.0.1:9090  "
        f"SRE dashboard http://127.0.0.1:{ports['preemption']}/dashboard  (Ctrl-C stops the demo)"
    )
    return Group(table, footer)


def _quota_source(q: dict[str, Any]) -> str:
    """What the quota in force was computed from: the model and whether it fell back."""
    f = q.get("forecast") or {}
    if not f:
        return "idle GPUs (no forecast)"
    model = str(f.get("version", "?")).split(":")[0]
    return f"{model} (fallback)" if f.get("fallback") else model
