"""The preemption service's SRE API (aiohttp): reads of the decider's live state and of the
decision records; the controls and the dashboard register their routes here. The metric families it
serves on `/metrics` are defined in metrics.py."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from aiohttp import web

from services.platform.metrics import Metrics, metrics_handler
from services.preemption import controls, store
from services.preemption.dashboard import register_dashboard
from services.preemption.explanations import explanation_dict
from services.preemption.query_params import id_param, int_param

if TYPE_CHECKING:
    from services.preemption.service import Decider


def build_api(decider: Decider, metrics: Metrics, ready: asyncio.Event) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "alive", "instance": decider.instance})

    async def readyz(_: web.Request) -> web.Response:
        ok = ready.is_set()
        # The inbox offset each owned partition has read up to (a replay driver's settle check).
        offsets = {str(p): s.next_offset for p, s in sorted(decider.partitions.items())}
        return web.json_response(
            {"ready": ok, "partitions": sorted(decider.partitions), "inbox_offsets": offsets},
            status=200 if ok else 503,
        )

    async def pools(_: web.Request) -> web.Response:
        out = {}
        for name, c in sorted(decider.owned_pools().items()):
            out[name] = {
                "nodes": len(c.nodes),
                "down": sorted(c.down),
                "capacity_gpus": int(c.runtime.state.online_capacity),
                "quota_gpus": {str(h): q for h, q in sorted(c.runtime.quota.items())},
                "quota_version": c.quota_version,
                "quota_frozen": c.quota_frozen,
                "pending_binds": sorted(c.pending),
                **c.running_and_queued(),
            }
        return web.json_response({"instance": decider.instance, "pools": out})

    async def explain(request: web.Request) -> web.Response:
        task_id = id_param(request, "task_id")
        live = None
        for c in decider.owned_pools().values():
            if task_id in c.seen:
                live = explanation_dict(c.explain(task_id))
        async with decider.pool.acquire() as connection:
            history = await store.decisions_of(connection, task_id)
        return web.json_response({"task_id": task_id, "live": live, "decisions": history})

    async def decisions(request: web.Request) -> web.Response:
        limit = int_param(request, "limit", default=50, low=1, high=500)
        async with decider.pool.acquire() as connection:
            rows = await store.recent_decisions(connection, limit)
        return web.json_response(rows)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/pools", pools)
    app.router.add_get("/explain/{task_id}", explain)
    app.router.add_get("/decisions", decisions)
    app.router.add_get("/metrics", metrics_handler(metrics))
    controls.register(app, decider)
    register_dashboard(app, decider)  # /dashboard (dashboard.py)
    return app
