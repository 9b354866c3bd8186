"""The SRE controls in force: the desired state every decider syncs its pools to.

The table `preemption_control` (0005_controls.sql) holds, cluster-wide, the controls an SRE set
through the API (services/preemption/sre/controls.py writes it, with an audit row). Every decider
reads it on its timer (`Decider.tick`) and, for each pool it owns whose controls differ, applies a
journaled `control` entry (`entries`); the rules of which row wins for a pool are `desired`. It
lives beside the journal, not in the SRE surface, because the decider needs it and must not import
the surface.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from gfs.services.preemption.controller.pool import PoolController
from gfs.services.preemption.controller.settings import Controls
from gfs.services.preemption.journal.entries import ControlEntry

log = logging.getLogger(__name__)

ALL = "*"  # the scope of a control for every pool
KILL_SWITCH, QUOTA, EVICTION_CAP = "kill_switch", "quota", "eviction_cap"
TENANT_BUDGET = "tenant_budget"  # scope: the spot tenant (in force in every pool, 0007_tenant_budgets.sql)


@dataclass(frozen=True, slots=True)
class ControlRow:
    control: str
    scope: str
    value: dict[str, Any]
    set_by: str
    set_at: datetime
    reason: str
    audit_id: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "control": self.control,
            "scope": self.scope,
            "value": self.value,
            "set_by": self.set_by,
            "set_at": self.set_at.isoformat(),
            "reason": self.reason,
            "audit_id": self.audit_id,
        }


_warned_missing = False


async def load(pool: asyncpg.Pool) -> list[ControlRow]:
    """The controls in force (an empty list before migration 0005 is applied, with a warning)."""
    global _warned_missing
    try:
        async with pool.acquire() as connection:
            rows = await connection.fetch(
                "SELECT control, scope, value, set_by, set_at, reason, audit_id FROM preemption_control"
            )
    except asyncpg.UndefinedTableError:
        if not _warned_missing:
            _warned_missing = True
            log.warning(
                "preemption: table preemption_control is missing (run `gfs db migrate`): no SRE controls"
            )
        return []
    return [
        ControlRow(
            str(r["control"]),
            str(r["scope"]),
            json.loads(r["value"]),
            str(r["set_by"]),
            r["set_at"],
            str(r["reason"]),
            int(r["audit_id"]),
        )
        for r in rows
    ]


def desired(pool: str, rows: list[ControlRow]) -> tuple[Controls, int | None]:
    """The controls `pool` must have, and the latest audit id behind them."""
    used: list[ControlRow] = []
    kill = [r for r in rows if r.control == KILL_SWITCH and r.scope in (ALL, pool) and r.value.get("on")]
    used += kill
    quota = next((r for r in rows if r.control == QUOTA and r.scope == pool), None)
    caps = {r.scope: r for r in rows if r.control == EVICTION_CAP and r.scope in (ALL, pool)}
    cap = caps.get(pool, caps.get(ALL))
    mode: str | None = None
    gpus: dict[str, float] = {}
    if quota is not None:
        used.append(quota)
        mode, gpus = quota.value["mode"], quota.value.get("quota_gpus") or {}
    max_evictions, interval = None, 3600.0
    if cap is not None:
        used.append(cap)
        max_evictions, interval = int(cap.value["max_evictions"]), float(cap.value["interval_s"])
    budgets = [r for r in rows if r.control == TENANT_BUDGET]
    used += budgets
    controls = Controls.from_dict(
        {
            "kill_switch": bool(kill),
            "quota_mode": mode,
            "quota_gpus": gpus,
            "max_evictions": max_evictions,
            "interval_s": interval,
            "tenant_budgets": {r.scope: r.value for r in budgets},
        }
    )
    return controls, max((r.audit_id for r in used), default=None)


def entries(
    controllers: dict[str, PoolController], rows: list[ControlRow], now: float
) -> list[tuple[str, ControlEntry]]:
    """A `control` journal entry for each pool whose controls differ from the desired ones."""
    out: list[tuple[str, ControlEntry]] = []
    for name, controller in controllers.items():
        wanted, audit_id = desired(name, rows)
        if wanted != controller.controls:
            out.append((name, ControlEntry(controls=wanted, audit_id=audit_id, at=now)))
    return out
