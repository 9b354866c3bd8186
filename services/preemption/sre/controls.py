"""SRE safety controls of the preemption service: kill switch, quota freeze/override, eviction cap,
per-tenant eviction budgets (issue 27: scope = the tenant, in force in every pool).

What each control does to decisions is the controller's (`PoolController.control`, a journaled
`control` entry) and the core's (the eviction cap is the pass's eviction budget, planned by the
victim search). This module is the I/O around it: the SRE API's routes, authentication, the
Postgres writes (`0005_controls.sql`); the desired state every decider syncs to is
journal/desired_controls.py.

How a control reaches the instance that owns the pool (docs/operations.md, "Safety controls"):
- A write (any instance, authenticated by the bearer token `PREEMPTION_ADMIN_TOKEN`) changes the
  row of `preemption_control` and appends an audit row (who, when, what, why, the value replaced)
  in ONE transaction: the table is the desired state, cluster-wide, whoever owns which pool.
- Every decider reads the table on its timer (`Decider.tick`, every `PREEMPTION_TICK_S`) and, for
  each pool it owns whose controls differ, applies a `control` entry through `inputs.apply` and
  journals it in the same transaction as its effects (epoch-checked). A restart or a failover
  replays the journal, then the next tick syncs to the table again, so nothing is lost and no
  instance needs to know who owns what. A cluster-wide control reaches pools created later too.
- The instance that took the write runs its timer at once, so on its own pools the control is in
  force before the response; other owners apply it within one tick.
Why not the inbox: a control record there would need a wire schema, could not reach pools that do
not exist yet (cluster-wide scope), and would leave no readable "what is in force" for the API.

Reads (`GET /controls`, `GET /controls/audit`) need no token.
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from gfs.services.preemption.controller.tenant_budgets import budgets_view
from gfs.services.preemption.journal.desired_controls import (
    ALL,
    EVICTION_CAP,
    KILL_SWITCH,
    QUOTA,
    TENANT_BUDGET,
    desired,
    load,
)
from gfs.services.preemption.sre.api_spec import (  # the bodies
    API,
    EvictionCapRequest,
    KillSwitchRequest,
    QuotaRequest,
    TenantBudgetRequest,
)

if TYPE_CHECKING:
    from gfs.services.preemption.sre.view import DeciderView

log = logging.getLogger(__name__)

_M = TypeVar("_M", bound=BaseModel)


# ----- writes ----------------------------------------------------------------------------------------
def _refusal(request: web.Request, decider: DeciderView) -> web.Response | None:
    token = decider.settings.preemption_admin_token
    expected = token.get_secret_value() if token is not None else ""
    if not expected:
        return web.json_response(
            {
                "error": "control writes are disabled: no admin token is configured "
                "(set PREEMPTION_ADMIN_TOKEN on the preemption service); reads need none"
            },
            status=503,
        )
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected.encode()):
        return web.json_response(
            {"error": "missing or wrong bearer token (Authorization: Bearer <PREEMPTION_ADMIN_TOKEN>)"},
            status=401,
            headers={"WWW-Authenticate": 'Bearer realm="gfs-preemption"'},
        )
    return None


async def _body(request: web.Request, model: type[_M]) -> _M | web.Response:
    try:
        return model.model_validate(await request.json())
    except (ValidationError, ValueError) as exc:
        detail = exc.errors(include_url=False) if isinstance(exc, ValidationError) else str(exc)
        return web.json_response(
            {"error": "invalid request", "detail": json.loads(json.dumps(detail, default=str))}, status=400
        )


async def write(
    decider: DeciderView, control: str, scope: str, value: dict[str, Any] | None, who: str, reason: str
) -> dict[str, Any]:
    """Set (or clear, `value` None) one control with its audit row, in one transaction; then apply
    it at once on the pools this instance owns."""
    async with decider.pool.acquire() as connection, connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock(hashtext('preemption_control'))")
        previous = await connection.fetchval(
            "SELECT value FROM preemption_control WHERE control = $1 AND scope = $2", control, scope
        )
        action = value if value is not None else {"cleared": True}
        audit_id = await connection.fetchval(
            """INSERT INTO preemption_control_audit (who, control, scope, action, previous, reason, instance)
               VALUES ($1, $2, $3, $4::jsonb, $5::jsonb, $6, $7) RETURNING id""",
            who,
            control,
            scope,
            json.dumps(action),
            previous,
            reason,
            decider.instance,
        )
        if value is None:
            await connection.execute(
                "DELETE FROM preemption_control WHERE control = $1 AND scope = $2", control, scope
            )
        else:
            await connection.execute(
                """INSERT INTO preemption_control (control, scope, value, set_by, reason, audit_id)
                   VALUES ($1, $2, $3::jsonb, $4, $5, $6)
                   ON CONFLICT (control, scope) DO UPDATE
                       SET value = $3::jsonb, set_by = $4, set_at = now(), reason = $5, audit_id = $6""",
                control,
                scope,
                json.dumps(value),
                who,
                reason,
                audit_id,
            )
    log.warning(
        "preemption: SRE control %s[%s] = %s by %s (%s), audit %d",
        control,
        scope,
        action,
        who,
        reason,
        audit_id,
    )
    try:
        await decider.tick()  # the timer's sync, now: in force here before we answer
    except Exception:
        log.exception("preemption: applying control %d at once failed; the next tick retries", audit_id)
    applied = {name: c.controls.as_dict() for name, c in sorted(decider.owned_pools().items())}
    return {
        "audit_id": audit_id,
        "control": control,
        "scope": scope,
        "value": value,
        "previous": None if previous is None else json.loads(previous),
        "applied_here": applied,
    }


def register(app: web.Application, decider: DeciderView) -> None:
    """The controls' routes on the SRE API (called from `service.build_api`)."""

    async def kill_switch(request: web.Request) -> web.Response:
        if (refused := _refusal(request, decider)) is not None:
            return refused
        API.query(request)  # the body carries everything: 400 for a query parameter
        body = await _body(request, KillSwitchRequest)
        if isinstance(body, web.Response):
            return body
        value = {"on": True} if body.on else None
        return web.json_response(
            await write(decider, KILL_SWITCH, body.pool or ALL, value, body.who, body.reason)
        )

    async def quota(request: web.Request) -> web.Response:
        if (refused := _refusal(request, decider)) is not None:
            return refused
        API.query(request)  # the body carries everything: 400 for a query parameter
        body = await _body(request, QuotaRequest)
        if isinstance(body, web.Response):
            return body
        value: dict[str, Any] | None = None
        if body.mode != "clear":
            value = {
                "mode": body.mode,
                "quota_gpus": {str(h): q for h, q in sorted((body.quota_gpus or {}).items())},
            }
        return web.json_response(await write(decider, QUOTA, body.pool, value, body.who, body.reason))

    async def eviction_cap(request: web.Request) -> web.Response:
        if (refused := _refusal(request, decider)) is not None:
            return refused
        API.query(request)  # the body carries everything: 400 for a query parameter
        body = await _body(request, EvictionCapRequest)
        if isinstance(body, web.Response):
            return body
        value = (
            None
            if body.max_evictions is None
            else {"max_evictions": body.max_evictions, "interval_s": body.interval_s}
        )
        return web.json_response(
            await write(decider, EVICTION_CAP, body.pool or ALL, value, body.who, body.reason)
        )

    async def tenant_budget(request: web.Request) -> web.Response:
        if (refused := _refusal(request, decider)) is not None:
            return refused
        API.query(request)  # the body carries everything: 400 for a query parameter
        body = await _body(request, TenantBudgetRequest)
        if isinstance(body, web.Response):
            return body
        value = None if body.max_evictions is None else {"max_evictions": body.max_evictions, "per": body.per}
        return web.json_response(
            await write(decider, TENANT_BUDGET, body.tenant, value, body.who, body.reason)
        )

    async def current(request: web.Request) -> web.Response:
        API.query(request)
        rows = await load(decider.pool)
        now = decider.clock.now()
        pools = {}
        for name, c in sorted(decider.owned_pools().items()):
            wanted, _audit = desired(name, rows)
            pools[name] = {
                "applied": c.controls.as_dict(),
                "in_sync": wanted == c.controls,
                "eviction_budget_left": c.runtime.cap.budget(max(now, c.runtime.now)),
                "quota_gpus": {str(h): q for h, q in sorted(c.runtime.quota.items())},
                "tenant_budgets": budgets_view(c.runtime, now),
            }
        return web.json_response(
            {"instance": decider.instance, "controls": [r.as_dict() for r in rows], "pools": pools}
        )

    async def audit(request: web.Request) -> web.Response:
        query = API.query(request)  # 400 for a bad limit or pool, or an unknown parameter
        limit, pool = query["limit"], query["pool"]
        async with decider.pool.acquire() as connection:
            rows = await connection.fetch(
                """SELECT id, at, who, control, scope, action, previous, reason, instance
                   FROM preemption_control_audit WHERE $1::text IS NULL OR scope = $1 OR scope = '*'
                   ORDER BY id DESC LIMIT $2""",
                pool,
                limit,
            )
        return web.json_response(
            [
                {
                    "id": r["id"],
                    "at": r["at"].isoformat(),
                    "who": r["who"],
                    "control": r["control"],
                    "scope": r["scope"],
                    "action": json.loads(r["action"]),
                    "previous": None if r["previous"] is None else json.loads(r["previous"]),
                    "reason": r["reason"],
                    "instance": r["instance"],
                }
                for r in rows
            ]
        )

    app.router.add_post("/controls/kill-switch", kill_switch)
    app.router.add_post("/controls/quota", quota)
    app.router.add_post("/controls/eviction-cap", eviction_cap)
    app.router.add_post("/controls/tenant-budget", tenant_budget)
    app.router.add_get("/controls", current)
    app.router.add_get("/controls/audit", audit)
