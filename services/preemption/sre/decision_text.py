"""A decision in words, for an SRE reading the dashboard (not a parser's format).

The decision journal keeps each decision's detail as JSON (`Decision.detail`: what the controller
knew when it decided). The dashboard showed that JSON; an SRE wants the sentence: "evicted
d1-12 from a100-07 for HP d1-40: cheapest of 5 nodes, cost 0.31 vs next 0.52". One function per
decision kind; a kind without one falls back to its detail's own message, then to compact JSON, so
a new kind is shown (plainly) before anyone writes its sentence.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

Detail = Mapping[str, Any]


def describe(kind: str, task_id: str, detail: Detail) -> str:
    """One line of what happened and why."""
    words = _KINDS.get(kind)
    if words is not None:
        try:
            return words(task_id, detail)
        except (KeyError, TypeError, ValueError, AttributeError):
            pass  # a detail of an older or newer shape: show it plainly rather than fail the page
    return _plain(detail)


def duration(seconds: float) -> str:
    """A run time a person reads at a glance: 42 s, 7.5 min, 3.2 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def gpu_time(gpu_seconds: float) -> str:
    """GPU time in the unit a person reads: 42 GPU-s, 7.5 GPU-min, 3.2 GPU-h."""
    number, unit = duration(gpu_seconds).split(" ")
    return f"{number} GPU-{unit}"


def _accepted(task_id: str, d: Detail) -> str:
    text = f"accepted {task_id} as {'spot' if d['class'] == 'SPOT' else d['class']}"
    quote = d.get("survival")  # issue 27; absent from decisions recorded before it
    if quote:
        text += f", quoted {quote['guarantee']:.2f} to run its {quote['guarantee_hours']} h uninterrupted"
    return text


def _warned(task_id: str, d: Detail) -> str:
    source = "forecast" if d["hp_demand"] == "forecast" else "HP running and queued"
    return (
        f"warned {task_id} (attempt {d['attempt']}) to checkpoint: HP may need "
        f"{d['shortfall_gpus']:.3g} spot GPUs back within {duration(d['lead_s'])} ({source})"
    )


def _started(task_id: str, d: Detail) -> str:
    nodes = d["nodes"]
    where = "; ".join(f"{node} GPU {_gpus(slots)}" for node, slots in nodes.items())
    text = f"started {task_id} on {where}"
    if d.get("preempted"):
        text += " after evicting spot work"
    if d.get("attempt", 1) > 1:
        text += f" (attempt {d['attempt']})"
    return text


def _gpus(slots: list[list[int]]) -> str:
    return ",".join(str(i) for worker in slots for i in worker)


def _evicted(task_id: str, d: Detail) -> str:
    node, reason = d.get("node") or "its node", d["reason"]
    if reason != "PREEMPTED_BY_HP":
        text = f"stopped {task_id} on {node}: {_REASONS.get(reason, reason.lower().replace('_', ' '))}"
        if d.get("run_s") is not None:
            text += f" after {duration(float(d['run_s']))}"
        return text
    text = f"evicted {task_id} from {node} for HP {d.get('preemptor') or '?'}"
    plan = ((d.get("explanation") or {}).get("last_eviction") or {}).get("plan")
    if plan:
        considered, winner = int(plan["considered"]), plan["winner"]
        if considered <= 1:
            text += f": the only node that could make room (cost {winner['cost']:.2f})"
        else:
            text += f": cheapest of {considered} nodes, cost {winner['cost']:.2f}"
            losers = plan.get("alternatives") or []
            if losers:
                text += f" vs next {losers[0]['cost']:.2f} ({losers[0]['node']})"
    if d.get("lost_gpu_seconds") is not None:
        text += f"; lost {gpu_time(float(d['lost_gpu_seconds']))} of work since its last checkpoint"
    return text


_REASONS = {
    "NODE_LOST": "its node went silent",
    "NODE_DRAIN": "its node is drained",
    "CANCELLED": "cancelled",
    "QUOTA_REDUCED": "the spot quota shrank below what spot holds",
}


def _finished(task_id: str, d: Detail) -> str:
    code = d.get("exit_code", 0)
    how = "finished" if code == 0 else f"failed with exit code {code}"
    text = f"{task_id} {how} after {duration(float(d['run_s']))}"
    if d.get("during_eviction"):
        text += " (its workers exited while an eviction was on its way: a finish, not an eviction)"
    return text


def _quota(task_id: str, d: Detail) -> str:
    values = d["quota"]
    first = min(values, key=int)
    source = str(d.get("version", "")).split("@", 1)[0]
    return f"spot quota {float(values[first]):g} GPUs for {first} h (eta {float(d['eta']):.2f}) from {source}"


def _evict_acked(task_id: str, d: Detail) -> str:
    tasks = ", ".join(d.get("tasks") or [task_id])
    return f"{d['node']} confirmed the eviction of {tasks}: {str(d['outcome']).lower().replace('_', ' ')}"


def _bind_held(task_id: str, d: Detail) -> str:
    n = len(d.get("waiting_for") or [])
    return f"{task_id} waits to start until {n} eviction(s) are confirmed by their nodes"


def _bound(task_id: str, d: Detail) -> str:
    return f"bound {task_id}: {d['why']}"


def _node_joined(task_id: str, d: Detail) -> str:
    return f"node {d['node']} joined with {d['gpus']} GPUs"


def _plain(detail: Detail) -> str:
    for key in ("message", "why", "reason"):
        if detail.get(key):
            return str(detail[key])
    shown = {k: v for k, v in detail.items() if k != "trace_id"}
    text = json.dumps(shown, default=str, sort_keys=True)
    return text if len(text) <= 200 else text[:197] + "..."


_KINDS: dict[str, Callable[[str, Detail], str]] = {
    "accepted": _accepted,
    "started": _started,
    "evicted": _evicted,
    "finished": _finished,
    "quota": _quota,
    "evict_acked": _evict_acked,
    "bind_held": _bind_held,
    "bound": _bound,
    "node_joined": _node_joined,
    "warned": _warned,
}
