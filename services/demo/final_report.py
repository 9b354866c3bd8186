"""The final report of `gfs demo live` (services/demo/live.py): per pool, the guarantee periods that
failed against the target, the quotas computed from the LSTM, and the live run beside the
simulator's policies on the same sample."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
from rich.table import Table

from gfs.services.demo.side_by_side import COLUMNS, TITLE, Row, caption, cells, live, simulated, verdict
from gfs.services.demo.view import TARGET, View


async def _periods(db: asyncpg.Connection, run: str) -> dict[str, tuple[int, int]]:
    """Per pool, (failed, all) guarantee periods of the run's tasks the quota service has recorded
    so far (it reads the shared lifecycle topic: other runs' tasks are left out)."""
    rows = await db.fetch(
        "SELECT pool, count(*) FILTER (WHERE NOT succeeded) AS failed, count(*) AS n "
        "FROM guarantee_period_outcome WHERE starts_with(task_id, $1) GROUP BY pool",
        f"{run}-",
    )
    return {r["pool"]: (int(r["failed"]), int(r["n"])) for r in rows}


def _rates(view: View) -> dict[str, dict[str, float | int | None]]:
    """Per pool: the guarantee periods that failed against all that ended, and the target."""
    return {
        pool: {"failed": f, "periods": n, "rate": f / n if n else None, "target": TARGET}
        for pool, (f, n) in sorted(view.periods.items())
    }


async def _lstm_quotas(db: asyncpg.Connection) -> dict[str, Any]:
    """Quotas computed from a model forecast that was not a fallback, per pool: how many, and the
    forecast version of the latest (it names the model and its artifact)."""
    rows = await db.fetch(
        "SELECT pool, count(*) AS n, max(version) AS latest FROM quota_version "
        "WHERE NOT coalesce((forecast->>'fallback')::boolean, true) GROUP BY pool"
    )
    out: dict[str, Any] = {}
    for r in rows:
        version = await db.fetchval(
            "SELECT forecast->>'version' FROM quota_version WHERE pool = $1 AND version = $2",
            r["pool"], r["latest"],
        )  # fmt: skip
        out[r["pool"]] = {"quotas": int(r["n"]), "latest_forecast": version}
    return out


def _lstm_line(lstm: dict[str, Any], accelerated: bool) -> str:
    if not lstm:
        why = "" if accelerated else " (wall clock: no forecast hour closes in a few minutes)"
        return f"quotas from a model forecast: none{why}"
    return "quotas from a model forecast: " + "; ".join(
        f"{pool}: {v['quotas']} (latest from {v['latest_forecast']})" for pool, v in sorted(lstm.items())
    )


async def _report(db: asyncpg.Connection, view: View, run: str) -> Table:
    table = Table(title=f"GFS live demo {run}: final report")
    for column in (
        "pool",
        "accepted",
        "rejected",
        "started",
        "finished",
        "evicted",
        "bound after preemption",
    ):
        table.add_column(column, justify="right")
    pools = sorted(view.pools) or sorted({p for p, _ in view.counts})
    for pool in pools:
        c = view.counts
        table.add_row(
            pool,
            *(
                str(c.get((pool, k), 0))
                for k in ("accepted", "rejected", "started", "finished", "evicted", "bound")
            ),
        )
    waits = await db.fetch(
        """SELECT s.pool,
                  percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM s.at - a.at)) AS p50
           FROM preemption_decision a
           JOIN preemption_decision s ON s.task_id = a.task_id AND s.kind = 'started'
           WHERE a.kind = 'accepted' GROUP BY s.pool"""
    )
    for r in waits:
        table.caption = (
            table.caption or ""
        ) + f"{r['pool']}: median submit->first start {float(r['p50']):.1f} s. "
    return table


async def _side_by_side(
    db: asyncpg.Connection, sample: Path, run: str, speed: float, clock_at: datetime | None
) -> list[Row]:
    """The live run beside the simulator's FIFO, k8s-priority and GFS on the same sample.
    `clock_at`: on the accelerated clock, the sample time it stopped at (decisions are stamped in
    the sample's time, so no wall-to-sample scaling); None on the wall clock."""
    from gfs.services.simulator.traces.gfs_format import load_gfs_trace

    stopped_at = clock_at or datetime.now(UTC)
    records = await db.fetch(
        "SELECT task_id, kind, at, detail FROM preemption_decision "
        "WHERE NOT dry_run AND kind IN ('accepted', 'started', 'evicted', 'finished')"
    )
    rows = [
        {**dict(r), "detail": json.loads(r["detail"]) if isinstance(r["detail"], str) else r["detail"]}
        for r in records
    ]
    trace = load_gfs_trace(sample)
    if clock_at is not None:
        name = f"live gfs (accelerated clock, {speed:g}x)"
        measured = live(rows, trace, prefix=f"{run}-", speed=1.0, stopped_at=stopped_at, name=name)
    else:
        measured = live(rows, trace, prefix=f"{run}-", speed=speed, stopped_at=stopped_at)
    return [measured, *await asyncio.to_thread(simulated, sample)]


def _side_by_side_table(rows: list[Row], speed: float, *, accelerated: bool = False) -> Table:
    table = Table(title=TITLE)
    for column in COLUMNS:
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(*cells(r))
    table.caption = " ".join(filter(None, (verdict(rows), caption(speed, accelerated=accelerated))))
    return table
