"""The preemption service's SRE API (aiohttp): reads of the decider's live state and of the
decision records; the controls and the dashboard register their routes here. The metric families it
serves on `/metrics` are defined in metrics.py; the contract (models, routes, query parameters) is
api_spec.py, served at `/openapi.json`."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from aiohttp import web

from gfs.services.platform.metrics import Metrics, metrics_handler
from gfs.services.platform.openapi import add_openapi, identifier
from gfs.services.preemption.controller.explanations import explanation_dict
from gfs.services.preemption.journal import store
from gfs.services.preemption.sre import controls
from gfs.services.preemption.sre.api_spec import API, Explain, Health, Pools, PoolView, Ready
from gfs.services.preemption.sre.dashboard import register_dashboard

if TYPE_CHECKING:
    from gfs.services.preemption.sre.view import DeciderView


def build_api(decider: DeciderView, metrics: Metrics, ready: asyncio.Event) -> web.Application:
    async def healthz(request: web.Request) -> web.Response:
        API.query(request)  # every route reads its query here: 400 for a bad or unknown parameter
        return web.json_response(Health(status="alive", instance=decider.instance).model_dump())

    async def readyz(request: web.Request) -> web.Response:
        API.query(request)
        ok = ready.is_set()
        # The inbox offset each owned partition has read up to (a replay driver's settle check).
        offsets = {str(p): s.next_offset for p, s in sorted(decider.partitions.items())}
        body = Ready(ready=ok, partitions=sorted(decider.partitions), inbox_offsets=offsets)
        return web.json_response(body.model_dump(), status=200 if ok else 503)

    async def pools(request: web.Request) -> web.Response:
        API.query(request)
        out = {}
        for name, c in sorted(decider.owned_pools().items()):
            out[name] = PoolView(
                nodes=len(c.nodes),
                down=sorted(c.down),
                capacity_gpus=int(c.runtime.state.online_capacity),
                quota_gpus={str(h): q for h, q in sorted(c.runtime.quota.items())},
                quota_version=c.quota_version,
                quota_frozen=c.quota_frozen,
                pending_binds=sorted(c.pending),
                **c.running_and_queued(),
            )
        return web.json_response(Pools(instance=decider.instance, pools=out).model_dump(mode="json"))

    async def explain(request: web.Request) -> web.Response:
        API.query(request)  # it takes none: 400 for any
        task_id = identifier("task_id", request.match_info["task_id"])
        live = None
        for c in decider.owned_pools().values():
            if task_id in c.seen:
                live = explanation_dict(c.explain(task_id))
        async with decider.pool.acquire() as connection:
            history = await store.decisions_of(connection, task_id)
        body = Explain.model_validate({"task_id": task_id, "live": live, "decisions": history})
        return web.json_response(body.model_dump(mode="json"))

    async def decisions(request: web.Request) -> web.Response:
        limit = API.query(request)["limit"]
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
    add_openapi(app, API)
    return app
