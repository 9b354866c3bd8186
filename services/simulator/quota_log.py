"""Why spot waits, hour by hour (issue 21): every input of each pool's spot quota and what held the
spot queue's head, as `gfs simulate --quota-log DIR` writes it (DIR/<policy>.csv).

One row per pool at the first quota refresh of each hour inside the window: the forecast
p-quantile for the next hour, the HP floor the quota used (running + placeable queued + a
reservation's growth; or running + every queued GPU for the issue-10 floor), eta, the predicted
spare GPUs before eta, the 1-hour quota, idle GPUs, spot in use, the spot queue and its head's wait
and reason (OVER_QUOTA: the quota; NO_FIT: placement; RESERVED: a reservation's nodes), and the
reservation. The live quota service shows the same inputs on /quotas.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from gfs.services.core.quota import QuotaInputs, QuotaSettings, hp_floor, hp_usage_ahead, spare_from_quantile
from gfs.services.core.runtime import PoolRuntime

COLUMNS = (
    "time_s",
    "pool",
    "capacity",
    "idle_gpus",
    "spot_in_use",
    "hp_running",
    "hp_queued",
    "hp_placeable",
    "forecast_quantile_h1",
    "hp_floor",
    "eta",
    "spare_h1",
    "quota_h1",
    "spot_queued",
    "spot_head_wait_s",
    "spot_head_held_by",
    "reserved_task",
    "reserved_nodes",
)


def _num(x: float | None) -> str:
    return "" if x is None else f"{x:.6g}"


@dataclass
class QuotaLog:
    """Rows kept in memory during a run (about 24 x pools per simulated day), written at the end."""

    rows: list[dict[str, str]] = field(default_factory=list)
    _last_hour: dict[str, int] = field(default_factory=dict)

    def record(self, now: float, pool: str, rt: PoolRuntime, inputs: QuotaInputs, s: QuotaSettings) -> None:
        hour = int(now // 3600)
        if self._last_hour.get(pool) == hour:
            return
        self._last_hour[pool] = hour
        q = inputs.hp_quantile
        if q is None or len(q) == 0:
            spare = float(inputs.idle_gpus + inputs.spot_in_use)
            first = None
        else:
            spare = float(spare_from_quantile(hp_usage_ahead(q, inputs, s), inputs.capacity)[0])
            first = float(q[0])
        head = rt.spot.head()
        why = rt.spot_head_reason()
        res = rt.reservation
        self.rows.append(
            {
                "time_s": f"{now:.0f}",
                "pool": pool,
                "capacity": str(inputs.capacity),
                "idle_gpus": str(inputs.idle_gpus),
                "spot_in_use": _num(inputs.spot_in_use),
                "hp_running": _num(rt.state.hp_in_use),
                "hp_queued": _num(rt.hp.gpus),
                "hp_placeable": _num(inputs.hp_placeable),
                "forecast_quantile_h1": _num(first),
                "hp_floor": _num(hp_floor(inputs, s)),
                "eta": _num(rt.eta),
                "spare_h1": _num(spare),
                "quota_h1": _num(rt.quota.get(1)),
                "spot_queued": str(len(rt.spot)),
                "spot_head_wait_s": "" if head is None else f"{now - rt.spot.entered_s[head]:.0f}",
                "spot_head_held_by": "" if why is None else why.name,
                "reserved_task": "" if res is None else str(res.task_id),
                "reserved_nodes": "0" if res is None else str(len(res.nodes)),
            }
        )

    def idle_waits(self, idle_share: float = 0.2, wait_s: float = 3600.0) -> dict[str, dict[str, int]]:
        """Per pool and reason: the logged hours in which spot waited longer than `wait_s` while at
        least `idle_share` of the pool's GPUs were idle (issue 21's target: none, unless this log
        says why)."""
        out: dict[str, dict[str, int]] = {}
        for r in self.rows:
            cap = float(r["capacity"])
            waited = r["spot_head_wait_s"] != "" and float(r["spot_head_wait_s"]) > wait_s
            if waited and cap > 0 and float(r["idle_gpus"]) >= idle_share * cap:
                by_reason = out.setdefault(r["pool"], {})
                reason = r["spot_head_held_by"] or "UNKNOWN"
                by_reason[reason] = by_reason.get(reason, 0) + 1
        return out

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="", encoding="utf-8") as out:
            writer = csv.DictWriter(out, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(self.rows)
