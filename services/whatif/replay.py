"""The rebuilt trace through the simulator (the runner the evaluation uses), measured the way what
happened is measured (outcomes.py).

The simulation covers exactly the log: its window runs from t = 0 to the log's last event with no
drain, so a simulated policy gets the same time to do its work as the live service had; the
persistence forecast is the live forecast service's (the settling-clock parity runs use it too).
Each run's decision log (services/simulator/decision_log.py) gives the starts, evictions and
cancellations; its finish times come from the simulation's per-task lives.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
from collections.abc import Mapping
from typing import Any

from gfs.services.core.policies.registry import build_policy
from gfs.services.core.quota import QuotaSettings
from gfs.services.simulator.decision_log import DecisionLog
from gfs.services.simulator.runner import ForecastSource, RunSettings, build_simulation, prepare
from gfs.services.whatif.outcomes import Event, Summary, TaskInfo, summarize
from gfs.services.whatif.rebuild import Rebuilt

# `--set` names an operator knows from the paper, for the quota's settings.
ALIASES = {"p": "guarantee_rate", "eps": "target_eviction_rate"}


def quota_settings(items: list[str]) -> QuotaSettings | None:
    """`--set KEY=VALUE` items as the quota's settings (None: the policy's defaults)."""
    if not items:
        return None
    fields = {f.name: f for f in dataclasses.fields(QuotaSettings)}
    given: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        name = ALIASES.get(key.strip(), key.strip())
        if not sep or name not in fields:
            known = ", ".join([*ALIASES, *sorted(fields)])
            raise ValueError(f"--set {item!r}: expected KEY=VALUE with KEY one of {known}")
        default = fields[name].default
        try:
            if isinstance(default, bool):
                if value.lower() not in ("true", "false"):
                    raise ValueError(value)
                given[name] = value.lower() == "true"
            elif isinstance(default, int) and not isinstance(default, bool):
                given[name] = int(value)
            elif isinstance(default, float) or default is None:
                given[name] = float(value)
            else:
                given[name] = value
        except ValueError:
            raise ValueError(f"--set {item!r}: {value!r} is not a valid {name}") from None
    return QuotaSettings(**given)


def simulate(
    rebuilt: Rebuilt, policy: str, settings: QuotaSettings | None = None
) -> tuple[Summary, frozenset[str]]:
    """`policy` (a registry name) with `settings` on the rebuilt trace, summarized; and the tasks
    it replayed (the simulator refuses a task no node could ever hold: it never queues there)."""
    end = max(rebuilt.end_s, 1.0)
    run = RunSettings(
        forecast=ForecastSource.PERSISTENCE, window_days=math.ceil(end / 86400.0) + 1.0, drain_days=0.0,
        window_end_s=end,
    )  # fmt: skip
    workload, demand = prepare(rebuilt.trace, run)
    out = io.StringIO()
    log = DecisionLog(out, policy)
    sim = build_simulation(workload, demand, build_policy(policy, settings), run, log, log.cancelled)
    sim.run()
    events: dict[str, list[tuple[float, Event]]] = {}
    for raw in out.getvalue().splitlines():
        line = json.loads(raw)
        kind = _EVENTS[line["action"]]
        if line["action"] == "cancel" and line.get("node") is None:
            kind = Event.WITHDRAW
        if kind is not None:
            events.setdefault(str(line["task"]), []).append((float(line["t"]), kind))
    for tid, life in sim.lives.items():
        if not math.isnan(life.end):
            events.setdefault(str(tid), []).append((float(life.end), Event.FINISH))
    kept = frozenset(str(k) for k in sim.lives)
    tasks: Mapping[str, TaskInfo] = {t: i for t, i in rebuilt.tasks.items() if t in kept}
    return summarize(tasks, events, end), kept


_EVENTS: dict[str, Event | None] = {
    "start": Event.START,
    "renew": None,  # the same run goes on under a new lease
    "evict": Event.EVICT,
    "stop": Event.REQUEUE,
    "cancel": Event.STOP,
}
