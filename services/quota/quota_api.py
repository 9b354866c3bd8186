"""The quota service's SRE read API (`build_api`): health, readiness, the quota per pool and
duration with the inputs behind it, forecast health. Its contract is api_spec.py."""

from __future__ import annotations

import asyncio

from aiohttp import web

from gfs.services.platform.metrics import Metrics, metrics_handler
from gfs.services.platform.openapi import add_openapi
from gfs.services.quota import store
from gfs.services.quota.api_spec import API, ForecastHealth, Health, PoolQuota, Ready
from gfs.services.quota.view import QuotaView


def build_api(service: QuotaView, metrics: Metrics, ready: asyncio.Event) -> web.Application:
    """The SRE read API: quota per pool and duration, eta, eviction rate, the forecast behind it.
    Its contract is api_spec.py (served at /openapi.json); none of its routes takes a query
    parameter, so any is a 400 (a typo is refused rather than ignored)."""

    async def healthz(request: web.Request) -> web.Response:
        API.query(request)
        return web.json_response(Health(status="alive").model_dump())

    async def readyz(request: web.Request) -> web.Response:
        API.query(request)
        ok = ready.is_set()
        return web.json_response(Ready(ready=ok).model_dump(), status=200 if ok else 503)

    async def quotas(request: web.Request) -> web.Response:
        API.query(request)
        out = {}
        for name, c in sorted(service.latest.items()):
            quantile = c.inputs.hp_quantile
            out[name] = PoolQuota.model_validate({
                "quota_gpus": {str(h): q for h, q in sorted(c.quota.items())},
                "eta": c.eta,
                "version": service.books[name].version,
                "computed_at": store.utc(c.computed_s).isoformat(),
                "valid_until": store.utc(c.valid_until_s).isoformat(),
                "capacity_gpus": c.capacity,
                "eviction_rate_recent": c.eviction_rate,
                "periods_recent": {"failed": c.failed_recent, "succeeded": c.succeeded_recent},
                "hp_running_plus_queued": c.inputs.hp_observed,
                # Why spot waits (issue 21): every input of the quota, and what held the spot head.
                "hp_placeable": c.inputs.hp_placeable,
                "hp_floor": c.hp_floor,
                "spare_gpus": {str(h): f for h, f in sorted(c.min_free.items())},
                "idle_gpus": c.inputs.idle_gpus,
                "spot_in_use_gpus": c.inputs.spot_in_use,
                "reserved_task_id": c.reserved_task_id,
                "spot_head_held_by": c.spot_head_held_by,
                "forecast": None
                if c.forecast is None
                else {
                    "version": c.forecast.version,
                    "origin": store.utc(c.forecast.origin_s).isoformat(),
                    "fallback": c.forecast.fallback,
                    "p_quantile": None if quantile is None else [float(x) for x in quantile],
                },
            }).model_dump(mode="json")  # fmt: skip
        return web.json_response(out)

    async def forecast_health(request: web.Request) -> web.Response:
        API.query(request)
        now = service.clock.now()
        out = {}
        for name, book in sorted(service.books.items()):
            samples, share = book.forecast_health(now)
            out[name] = ForecastHealth(
                samples_last_day=samples,
                coverage=share,  # realised <= predicted p-quantile
                target=book.settings.guarantee_rate,
            ).model_dump()
        return web.json_response(out)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/forecast-health", forecast_health)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/quotas", quotas)
    app.router.add_get("/metrics", metrics_handler(metrics))
    add_openapi(app, API)
    return app
