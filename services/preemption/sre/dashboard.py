"""The SRE dashboard of the preemption service: `/dashboard` on its SRE API (PREEMPTION_API_PORT).

One server-rendered HTML page (no JavaScript, no CDN: it works offline and in `--dump-dom`),
refreshed every 15 s by the browser, with:

- quota against forecast per owned pool: the spot quota in force per guarantee duration (and its
  version), capacity, and the HP demand forecast behind the quota service's last quota, read from
  the quota service's `quota_input_latest` table when it shares the database (else the version
  string alone); plotted in `/dashboard/quota.svg`;
- evictions over time: `preemption_decision` rows of kind `evicted` in time buckets per pool
  (`/dashboard/evictions.svg`);
- queue lengths: running and queued tasks per pool and class, live from the deciders
  (`/dashboard/queues.svg`);
- the latest decisions with their explanation and a link to each task's trace in Jaeger
  (`{JAEGER_UI_URL}/trace/{trace_id}`; the trace id is the one the decision recorded, see
  `with_trace_id`, else the one of the task's submission this instance remembers), and per task
  the survival probability quoted at acceptance (for its guaranteed duration: the "accepted"
  decision's `survival`) and the reclaim warnings it was sent (issue 27, `task_notes`);
- the tenant eviction budgets per pool (used, left).

`/dashboard/data` is the JSON behind it all. Plots are SVG rendered with matplotlib (Agg) in a
worker thread (dashboard_plots.py). Values in the page carry `data-k` attributes (e.g.
`data-k="pool:P:hp_queued"`), so tests read them without scraping layout.
"""

from __future__ import annotations

import asyncio
import html
import json
import os
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import asyncpg
from aiohttp import web

from gfs.services.preemption.controller.pool_views import idle_fit, idle_text, why_spot_waits
from gfs.services.preemption.controller.tenant_budgets import budgets_view
from gfs.services.preemption.journal import store
from gfs.services.preemption.journal.trace_ids import trace_id_of
from gfs.services.preemption.sre.api_spec import API
from gfs.services.preemption.sre.dashboard_plots import _locked, evictions_svg, queues_svg, quota_svg
from gfs.services.preemption.sre.decision_text import describe
from gfs.services.preemption.sre.trace_view import register_trace_view

if TYPE_CHECKING:
    from gfs.services.preemption.sre.view import DeciderView

JAEGER_UI_URL = "http://127.0.0.1:16686"  # the stack's Jaeger (infra/jaeger); JAEGER_UI_URL overrides
REFRESH_S = 15
DEFAULT_WINDOW_S = 6 * 3600
DEFAULT_BUCKET_S = 300


# ----- data ---------------------------------------------------------------------------------------
async def _forecasts(connection: asyncpg.Connection, pools: list[str]) -> dict[str, dict[str, Any]]:
    """The quota service's latest pool forecast per pool (empty when its tables are elsewhere)."""
    try:
        rows = await connection.fetch(
            "SELECT pool, as_of, payload FROM quota_input_latest "
            "WHERE kind = 'forecast' AND pool = ANY($1::text[])",
            pools,
        )
        quotas = await connection.fetch(
            "SELECT pool, guarantee_hours, quota_gpus, min_free_gpus, eta, forecast_id, computed_at "
            "FROM spot_quota WHERE pool = ANY($1::text[])",
            pools,
        )
    except (asyncpg.UndefinedTableError, asyncpg.InsufficientPrivilegeError):
        return {}
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        payload = json.loads(r["payload"]) if isinstance(r["payload"], str) else dict(r["payload"])
        horizon = sorted(payload.get("horizon", []), key=lambda h: h.get("hour_ahead", 0))
        quantile = _quantile_key(horizon)
        out[r["pool"]] = {
            "origin_time": r["as_of"].isoformat(),
            "model": f"{payload.get('model_name', '')} {payload.get('model_version', '')}".strip(),
            "quantile": quantile,
            "hours_ahead": [int(h.get("hour_ahead", 0)) for h in horizon],
            "hp_demand_mean": [float(h.get("mean", 0.0)) for h in horizon],
            "hp_demand_quantile": [
                float((h.get("quantiles") or {}).get(quantile, h.get("mean", 0.0))) for h in horizon
            ],
        }
    for r in quotas:
        entry = out.setdefault(r["pool"], {})
        entry.setdefault("quota_service", {})[str(r["guarantee_hours"])] = {
            "quota_gpus": float(r["quota_gpus"]),
            "min_free_gpus": int(r["min_free_gpus"]),
            "eta": float(r["eta"]),
            "forecast_id": r["forecast_id"],
            "computed_at": r["computed_at"].isoformat(),
        }
    return out


def _quantile_key(horizon: list[dict[str, Any]]) -> str:
    keys = sorted({k for h in horizon for k in (h.get("quantiles") or {})}, key=float)
    return keys[-1] if keys else ""


async def _evictions(
    connection: asyncpg.Connection, window_s: int, bucket_s: int, now_s: float
) -> dict[str, Any]:
    # The window ends at the service's own time (`now_s`), not Postgres's: on the controllable
    # clock (the accelerated demo) decisions are stamped in the replay's time.
    rows = await connection.fetch(
        """SELECT pool, floor(extract(epoch FROM at) / $1) * $1 AS bucket, count(*) AS n
           FROM preemption_decision
           WHERE kind = 'evicted' AND NOT dry_run AND at > $2
           GROUP BY 1, 2 ORDER BY 2, 1""",
        float(bucket_s), datetime.fromtimestamp(now_s - window_s, UTC),
    )  # fmt: skip
    series: dict[str, dict[str, int]] = {}
    for r in rows:
        at = datetime.fromtimestamp(float(r["bucket"]), UTC).isoformat()
        series.setdefault(r["pool"], {})[at] = int(r["n"])
    return {"window_s": window_s, "bucket_s": bucket_s, "by_pool": series,
            "total": sum(sum(v.values()) for v in series.values()),
            "until": datetime.fromtimestamp(now_s, UTC).isoformat()}  # fmt: skip


async def _task_rows(connection: asyncpg.Connection, task_ids: list[str]) -> list[asyncpg.Record]:
    """The acceptance and warning records of `task_ids` (the index on (task_id, id) serves it)."""
    rows: list[asyncpg.Record] = await connection.fetch(
        "SELECT task_id, kind, at, detail FROM preemption_decision "
        "WHERE task_id = ANY($1::text[]) AND kind IN ('accepted', 'warned') ORDER BY id",
        task_ids,
    )
    return rows


def task_notes(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per task, from its "accepted" and "warned" decision rows in id order: the survival quoted at
    its (latest) acceptance for its guaranteed duration (None: HP, no forecast, or a decision
    recorded before issue 27), the warnings it was sent and the last one's time."""
    notes: dict[str, dict[str, Any]] = {}
    for row in rows:
        note = notes.setdefault(row["task_id"], {"survival": None, "warnings": 0, "last_warned": None})
        detail = row["detail"]
        if row["kind"] == "accepted":
            survival = detail.get("survival")
            note["survival"] = None if not survival else survival.get("guarantee")
        elif row["kind"] == "warned":
            note["warnings"] += 1
            note["last_warned"] = row["at"]
    return notes


async def dashboard_data(
    decider: DeciderView, *, limit: int = 20, window_s: int = DEFAULT_WINDOW_S,
    bucket_s: int = DEFAULT_BUCKET_S, jaeger_ui_url: str = JAEGER_UI_URL,
) -> dict[str, Any]:  # fmt: skip
    owned = dict(sorted(decider.owned_pools().items()))
    pools: dict[str, Any] = {}
    for name, c in owned.items():
        pools[name] = {
            "nodes": len(c.nodes),
            "down": sorted(c.down),
            "capacity_gpus": int(c.runtime.state.online_capacity),
            "quota_gpus": {str(h): q for h, q in sorted(c.runtime.quota.items())},
            "quota_version": c.quota_version,
            "quota_frozen": c.quota_frozen,
            "pending_binds": len(c.pending),
            **c.running_and_queued(),
            "why_spot_waits": why_spot_waits(c.runtime),
            "idle_while_work_fits": idle_fit(c),
            "tenant_budgets": budgets_view(c.runtime, decider.clock.now()),
        }
    async with decider.pool.acquire() as connection:
        forecasts = await _forecasts(connection, list(owned))
        evictions = await _evictions(connection, window_s, bucket_s, decider.clock.now())
        rows = await store.recent_decisions(connection, limit)
        tasks = sorted({r["task_id"] for r in rows if r["task_id"]})
        notes = task_notes([
            {"task_id": r["task_id"], "kind": r["kind"], "at": r["at"].isoformat(),
             "detail": json.loads(r["detail"]) if isinstance(r["detail"], str) else dict(r["detail"])}
            for r in await _task_rows(connection, tasks)
        ])  # fmt: skip
    for name, entry in pools.items():
        entry["forecast"] = forecasts.get(name)
    decisions = []
    for row in rows:
        detail = row["detail"]
        trace_id = detail.get("trace_id") or trace_id_of(decider.contexts, row["task_id"])
        decisions.append({
            "pool": row["pool"], "task_id": row["task_id"], "kind": row["kind"], "at": row["at"],
            "dry_run": row["dry_run"], "explanation": describe(row["kind"], row["task_id"], detail),
            "trace_id": trace_id,
            "trace_url": f"{jaeger_ui_url}/trace/{trace_id}" if trace_id else None,
            **notes.get(row["task_id"], {"survival": None, "warnings": 0, "last_warned": None}),
        })  # fmt: skip
    return {
        "instance": decider.instance,
        "generated_at": datetime.now(UTC).isoformat(),
        "jaeger_ui_url": jaeger_ui_url,
        "pools": pools,
        "evictions": evictions,
        "decisions": decisions,
    }


# ----- the page -----------------------------------------------------------------------------------
def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _cell(key: str, value: Any) -> str:
    return f'<td data-k="{_e(key)}">{_e(value)}</td>'


def _budget_rows(pools: dict[str, Any]) -> str:
    """One row per pool and budgeted tenant: its budget, the evictions counted, what is left."""
    rows = []
    for name, p in pools.items():
        for tenant, b in p.get("tenant_budgets", {}).items():
            k = f"budget:{name}:{tenant}"
            per = "day" if b["per"] == "day" else "100 guarantee periods"
            rows.append(
                "<tr>" + _cell(f"{k}:pool", name) + _cell(f"{k}:tenant", tenant)
                + _cell(f"{k}:budget", f"{b['max_evictions']} per {per}")
                + _cell(f"{k}:used", b["used"]) + _cell(f"{k}:left", b["left"]) + "</tr>"
            )  # fmt: skip
    return "".join(rows)


def render_page(data: dict[str, Any], query: str = "") -> str:
    pools = data["pools"]
    rows = []
    for name, p in pools.items():
        f = p.get("forecast") or {}
        peak = max(f.get("hp_demand_quantile") or [0.0]) if f.get("hours_ahead") else None
        forecast = (
            "-"
            if peak is None
            else f"p{f.get('quantile', '')} peak {peak:g} GPUs over {len(f['hours_ahead'])} h"
        )
        quota = ", ".join(f"{h} h: {q:g}" for h, q in p["quota_gpus"].items()) or "none"
        # The quota's own inputs, as the quota service stored them for the shortest guarantee:
        # eta (the eviction feedback) and the spare GPUs the forecast leaves before eta.
        computed = f.get("quota_service") or {}
        shortest = computed[min(computed, key=int)] if computed else None
        eta = "-" if shortest is None else f"{shortest['eta']:.2f}"
        spare = "-" if shortest is None else str(shortest["min_free_gpus"])
        why = p["why_spot_waits"]
        held = why["reserved_task_id"]
        reservation = f"{held} on {why['reserved_nodes']} nodes" if held else "-"
        k = f"pool:{name}"
        rows.append(
            "<tr>"
            + _cell(f"{k}:name", name)
            + _cell(f"{k}:nodes", p["nodes"])
            + _cell(f"{k}:capacity_gpus", p["capacity_gpus"])
            + _cell(f"{k}:quota_gpus", quota)
            + _cell(f"{k}:quota_version", p["quota_version"] or "-")
            + _cell(f"{k}:forecast", forecast)
            + _cell(f"{k}:spare", spare)
            + _cell(f"{k}:eta", eta)
            + _cell(f"{k}:hp_running", p["hp_running"])
            + _cell(f"{k}:hp_queued", p["hp_queued"])
            + _cell(f"{k}:spot_running", p["spot_running"])
            + _cell(f"{k}:spot_queued", p["spot_queued"])
            + _cell(f"{k}:down", len(p["down"]))
            + _cell(f"{k}:hp_floor", f"{why['hp_placeable_gpus']:g}")
            + _cell(f"{k}:spot_head_held_by", why["spot_head_held_by"] or "-")
            + _cell(f"{k}:reservation", reservation)
            + _cell(f"{k}:idle_fit", idle_text(p.get("idle_while_work_fits")))
            + "</tr>"
        )
    decisions = []
    for i, d in enumerate(data["decisions"]):
        k = f"decision:{i}"
        links = []
        if d["task_id"]:  # the task's whole story as the service tells it (`gfs explain` as JSON)
            links.append(f'<a data-k="{k}:explain" href="/explain/{_e(d["task_id"])}">why</a>')
        if d["trace_url"]:
            links.append(f'<a data-k="{k}:trace" href="{_e(d["trace_url"])}">trace</a>')
        if d["trace_id"]:  # Jaeger's own UI may be absent (infra/jaeger): the spans drawn here too
            links.append(f'<a href="/dashboard/trace/{_e(d["trace_id"])}">spans</a>')
        link = " ".join(links) or "-"
        decisions.append(
            f'<tr class="kind-{_e(d["kind"])}">'
            + _cell(f"{k}:at", d["at"][11:23])
            + _cell(f"{k}:pool", d["pool"])
            + _cell(f"{k}:task_id", d["task_id"])
            + _cell(f"{k}:kind", d["kind"])
            + _cell(f"{k}:survival", "-" if d.get("survival") is None else f"{d['survival']:.2f}")
            + _cell(f"{k}:warnings", d.get("warnings", 0))
            + f'<td class="why" data-k="{k}:explanation">{_e(d["explanation"])}</td><td>{link}</td></tr>'
        )
    ev = data["evictions"]
    suffix = f"?{_e(query)}" if query else ""
    budgets = _budget_rows(pools)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{REFRESH_S}">
<title>GFS preemption - {_e(data["instance"])}</title>
<style>
body {{ font-family: DejaVu Sans, Helvetica, Arial, sans-serif; margin: 16px; color: #222; font-size: 13px; }}
h1 {{ font-size: 18px; margin: 0 0 4px; }} h2 {{ font-size: 15px; margin: 18px 0 6px; }}
table {{ border-collapse: collapse; }} \
td, th {{ border: 1px solid #ddd; padding: 3px 6px; text-align: left; }}
th {{ background: #f3f3f3; }} .why {{ max-width: 640px; font-size: 12px; }} .muted {{ color: #777; }}
tr.kind-evicted td {{ background: #fdecea; }} tr.kind-started td {{ background: #eef7ee; }}
.plots {{ display: flex; flex-wrap: wrap; gap: 12px; }} \
.plots img {{ border: 1px solid #eee; max-width: 100%; }}
</style></head>
<body>
<h1>GFS preemption service <span class="muted">instance {_e(data["instance"])}</span></h1>
<div class="muted">generated <span data-k="generated_at">{_e(data["generated_at"])}</span>, \
refreshes every {REFRESH_S} s;
JSON: <a href="/dashboard/data{suffix}">/dashboard/data</a>; \
traces: <a href="{_e(data["jaeger_ui_url"])}">Jaeger</a></div>
<h2>Pools: quota against forecast, queues</h2>
<table id="pools"><tr><th>pool</th><th>nodes</th><th>capacity</th><th>spot quota (guarantee h: GPUs)</th>
<th>quota version</th><th>HP forecast</th><th>spare before eta (GPUs)</th><th>eta</th>\
<th>HP running</th><th>HP queued</th>\
<th>spot running</th><th>spot queued</th>
<th>nodes down</th><th>HP floor (GPUs)</th><th>spot head held by</th><th>reservation</th>
<th>idle while work fits</th></tr>
{"".join(rows) or '<tr><td colspan="14">no pool owned by this instance</td></tr>'}
</table>
<div class="plots">
<img id="quota-plot" alt="quota against forecast per pool" src="/dashboard/quota.svg">
<div><img id="queues-plot" alt="queue lengths per pool and class" src="/dashboard/queues.svg"><br>
<img id="evictions-plot" alt="evictions over time" src="/dashboard/evictions.svg{suffix}"></div>
</div>
<h2>Evictions: <span data-k="evictions:total">{ev["total"]}</span> \
in the last {ev["window_s"] / 3600:.3g} h</h2>
<h2>Tenant eviction budgets (per pool)</h2>
<table id="tenant-budgets"><tr><th>pool</th><th>tenant</th><th>budget</th><th>used</th><th>left</th></tr>
{budgets or '<tr><td colspan="5">no tenant budget set</td></tr>'}
</table>
<h2>Latest decisions</h2>
<table id="decisions"><tr><th>at (UTC)</th><th>pool</th><th>task</th><th>decision</th>\
<th>quoted survival</th><th>reclaim warnings</th><th>why</th><th>trace</th></tr>
{"".join(decisions) or '<tr><td colspan="8">no decision yet</td></tr>'}
</table>
</body></html>
"""


def register_dashboard(
    app: web.Application, decider: DeciderView, *, jaeger_ui_url: str | None = None
) -> None:
    """Add `/dashboard`, `/dashboard/data` and the plots to the SRE API `app`."""
    ui = (jaeger_ui_url or os.environ.get("JAEGER_UI_URL") or JAEGER_UI_URL).rstrip("/")

    async def data_of(request: web.Request) -> dict[str, Any]:
        q = API.query(request)  # 400 with a JSON reason for a bad or unknown parameter (api_spec.py)
        return await dashboard_data(
            decider, limit=q["limit"], window_s=q["window_s"], bucket_s=q["bucket_s"], jaeger_ui_url=ui
        )

    async def page(request: web.Request) -> web.Response:
        body = render_page(await data_of(request), request.query_string)
        return web.Response(text=body, content_type="text/html")

    async def data(request: web.Request) -> web.Response:
        return web.json_response(await data_of(request))

    def plot(render: Any) -> Any:
        async def handle(request: web.Request) -> web.Response:
            svg = await asyncio.to_thread(_locked, render, await data_of(request))
            return web.Response(body=svg, content_type="image/svg+xml", headers={"Cache-Control": "no-store"})

        return handle

    register_trace_view(app)
    app.router.add_get("/dashboard", page)
    app.router.add_get("/dashboard/data", data)
    app.router.add_get("/dashboard/quota.svg", plot(quota_svg))
    app.router.add_get("/dashboard/evictions.svg", plot(evictions_svg))
    app.router.add_get("/dashboard/queues.svg", plot(queues_svg))
