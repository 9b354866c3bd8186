"""`gfs explain TASK`: why was task X evicted, why is it not scheduled.

Reads the decision records from Postgres (every decision with its explanation: candidates, costs,
the winner, the quota version in force) and, when the preemption service's SRE API answers, the
live state of a queued task (why the last pass left it queued).
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

import typer

from gfs.services.platform.cli_output import Output, OutputOption


def explain(
    task_id: str = typer.Argument(..., help="the task id"),
    api: str = typer.Option("http://127.0.0.1:8082", "--api", help="preemption SRE API ('' to skip)"),
    as_json: bool = typer.Option(False, "--json", help="print the raw records (same as --output json)"),
    output: OutputOption = Output.table,
) -> None:
    """Explain a task's scheduling: placements, evictions (victims, alternatives, costs), queue reason."""
    live = _from_api(api, task_id) if api else None
    decisions = live["decisions"] if live is not None else asyncio.run(_from_db(task_id))
    if as_json or output is Output.json:
        typer.echo(
            json.dumps(
                {"task_id": task_id, "live": live and live.get("live"), "decisions": decisions}, indent=2
            )
        )
        return
    if not decisions and not (live and live.get("live")):
        typer.echo(f"no decision recorded for task {task_id}", err=True)
        raise typer.Exit(1)
    # Plain text, not wrapped to the terminal: lines are grep-able and copy-pasteable.
    typer.echo(render(task_id, decisions, live.get("live") if live else None))


def render(task_id: str, decisions: list[dict[str, Any]], live: dict[str, Any] | None) -> str:
    lines = [f"task {task_id}"]
    if live is not None:
        now = f"  now: {live['state']}"
        queued = live.get("queued")
        if queued:
            now += f"; still queued: {queued['message']}"
            if queued.get("blocked_by"):
                now += f" (behind {queued['blocked_by']})"
        lines.append(now)
    for d in decisions:
        detail = d["detail"]
        head = f"  {d['at']} {d['kind']}"
        if d["kind"] == "evicted":
            by = f" by {detail['preemptor']}" if detail.get("preemptor") else ""
            head += (
                f" on {detail.get('node', '-')} ({detail['reason']}{by}); "
                f"lost {detail.get('lost_gpu_seconds', 0):.0f} GPU-s"
            )
            plan = (detail.get("explanation") or {}).get("last_eviction", {}) or {}
            lines.append(head)
            lines += _plan_lines(plan.get("plan"))
            continue
        if d["kind"] == "started":
            nodes = ", ".join(f"{n} GPUs {g}" for n, g in detail.get("nodes", {}).items())
            head += f" attempt {detail.get('attempt')} on {nodes}" + (
                " (by preemption)" if detail.get("preempted") else ""
            )
            lines.append(head)
            for p in (detail.get("explanation") or {}).get("preemptions", []):
                lines += _plan_lines(p)
            continue
        if d["kind"] in ("rejected", "bound", "withdrawn", "finished", "bind_held", "evict_acked"):
            head += " " + ", ".join(f"{k}={v}" for k, v in detail.items() if k != "explanation")
        lines.append(head)
    return "\n".join(lines)


def _plan_lines(plan: dict[str, Any] | None) -> list[str]:
    if not plan:
        return []
    w = plan["winner"]
    out = [f"      chosen node {w['node']}: victims {', '.join(w['victims']) or 'none'}, cost {w['cost']:.6g}"
           + _terms(w) + f" (of {plan['considered']} candidates)"]  # fmt: skip
    for a in plan.get("alternatives", []):
        out.append(
            f"      alternative {a['node']}: victims {', '.join(a['victims']) or 'none'}, "
            f"cost {a['cost']:.6g}" + _terms(a)
        )
    return out


def _terms(c: dict[str, Any]) -> str:
    if c.get("eviction_rate_term") is None:
        return ""
    return f" = eviction-rate {c['eviction_rate_term']:.4g} + lost-work {c['lost_gpu_term']:.4g}"


def _from_api(api: str, task_id: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"{api.rstrip('/')}/explain/{task_id}", timeout=3) as response:
            found: dict[str, Any] = json.loads(response.read())
            return found
    except (urllib.error.URLError, OSError, ValueError):
        return None


async def _from_db(task_id: str) -> list[dict[str, Any]]:
    import asyncpg

    from gfs.services.platform.settings import PlatformSettings
    from gfs.services.preemption.journal import store

    connection = await asyncpg.connect(PlatformSettings().database_url)
    try:
        return await store.decisions_of(connection, task_id)
    finally:
        await connection.close()
