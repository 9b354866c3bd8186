"""Early reclaim warnings in the live service (issue 27 item 2): "checkpoint now" to the spot tasks
HP is expected to take back within the lead time.

On every controller tick the pool's risk is judged by the pure core (services/core/reclaim_warning:
`shortfall_gpus`, `warn_candidates`, the same rule the simulator's accounting uses) from:
- the HP demand the forecast allows for: the WarningSettings.quantile of the Gaussian per hour of
  the last SpotQuota's `hp_demand` (mean + z * std), its hours already over dropped as the
  survival quote does (survival_quote.py); no `hp_demand` (no forecast, or a quota service from
  before issue 27): the HP GPUs running and queued now, as the core falls back to;
- the controller's runtime: online capacity, spot GPUs in use, the running spot tasks.
While the SRE kill switch is on nothing is preempted, so nothing is warned.

Each (task, attempt) is warned at most once per `lead_s`: a TaskReclaimWarning lifecycle event, one
signed WarnCommand per node holding a worker of that attempt (the agent sends the workers SIGUSR1),
and a "warned" decision record for `gfs explain`. A warning changes no scheduling decision, so the
simulator-vs-live parity (services/parity, which compares lifecycle outcomes) is unaffected.

Determinism: the controller is rebuilt by replaying its journal, and a tick is journaled when it
has effects, so what is warned depends only on the controller's state and `now`. Warning command
ids are uuid5 of pool, task, attempt, the warning's time and node: a replay re-derives the same
ids (the agent signals once per id) and they never draw on the controller's id counter, whose
sequence the journaled commands' ids depend on.
"""

from __future__ import annotations

import uuid
from collections.abc import Container, Mapping
from dataclasses import dataclass, field
from statistics import NormalDist

from gfs.schemas.commands import WarnCommand
from gfs.schemas.quota import SpotQuota
from gfs.schemas.tasks import TaskReclaimWarning
from gfs.services.core.reclaim_warning import WarningSettings, shortfall_gpus, warn_candidates
from gfs.services.core.runtime import PoolRuntime
from gfs.services.preemption.controller.types import Decision, Effects, _Task, utc

HOUR_S = 3600.0
WARN_NAMESPACE = uuid.UUID("0b6f2a8e-4c1d-4e7a-9f35-7d2c8e1a5b90")


def hp_quantile(quota: SpotQuota | None, now: float, quantile: float) -> tuple[list[float] | None, float]:
    """The `quantile` of the quota's HP-demand forecast per hour, row 0 the hour holding `now`, and
    `now`'s offset into that hour (what `shortfall_gpus` reads as `now`). (None, now): no forecast
    or every hour of it over."""
    if quota is None or not quota.hp_demand:
        return None, now
    since = now - quota.valid_from.timestamp()
    skip = max(0, int(since // HOUR_S))
    hours = quota.hp_demand[skip:]
    if not hours:
        return None, now
    z = NormalDist().inv_cdf(quantile)
    return [h.mean + z * h.std for h in hours], max(0.0, since - skip * HOUR_S)


def warning_id(pool: str, task_id: str, attempt: int, at_s: float, node: str) -> uuid.UUID:
    return uuid.uuid5(WARN_NAMESPACE, f"{pool}/{task_id}/{attempt}/{at_s!r}/{node}")


@dataclass(slots=True)
class ReclaimWarnings:
    settings: WarningSettings = field(default_factory=WarningSettings)
    last: dict[tuple[str, int], float] = field(default_factory=dict)  # (task, attempt) -> last warned
    sent: int = 0

    def check(
        self, pool: str, rt: PoolRuntime, tasks: Mapping[str, _Task], held: Container[str],
        *, kill_switch: bool, last_quota: SpotQuota | None, now: float,
    ) -> Effects:  # fmt: skip
        """The warnings due at `now` (the runtime's time) in the pool: its runtime, its tasks, the
        tasks whose binds are held (nothing of them runs yet), the SRE kill switch and the last
        SpotQuota received."""
        out = Effects()
        s = self.settings
        st = rt.state
        running = {
            tid: task.run
            for tid, task in tasks.items()
            if task.run is not None and tid not in held  # held binds: nothing runs yet
        }
        # Forget runs that ended, so the table holds only what can still be warned.
        self.last = {k: v for k, v in self.last.items() if (r := running.get(k[0])) and r.number == k[1]}
        if kill_switch:
            return out  # no preemption at all: nothing will be reclaimed, nothing to warn of
        quantile, offset = hp_quantile(last_quota, now, s.quantile)
        short = shortfall_gpus(st.online_capacity, st.spot_in_use, rt.hp_observed, quantile, offset, s.lead_s)
        for core_id in warn_candidates(st, short, now, s.margin):
            tid = str(core_id)
            run = running.get(tid)
            if run is None:
                continue
            key = (tid, run.number)
            previous = self.last.get(key)
            if previous is not None and now - previous < s.lead_s:
                continue
            self.last[key] = now
            self.sent += 1
            nodes = sorted(set(run.workers.values()))
            out.events.append(
                TaskReclaimWarning(
                    task_id=tid, pool=pool, attempt=run.number, lead_s=s.lead_s,
                    shortfall_gpus=short, issued_at=utc(now),
                )
            )  # fmt: skip
            for node in nodes:
                out.commands.append(
                    WarnCommand(
                        command_id=warning_id(pool, tid, run.number, now, node), node=node,
                        task_id=tid, warned_attempt=run.number, lead_seconds=s.lead_s,
                        issued_at=utc(now),
                    )
                )  # fmt: skip
            detail = {
                "attempt": run.number,
                "lead_s": s.lead_s,
                "shortfall_gpus": short,
                "hp_demand": "forecast" if quantile is not None else "observed",
                "nodes": nodes,
            }
            out.decisions.append(Decision(tid, "warned", now, detail))
        return out
