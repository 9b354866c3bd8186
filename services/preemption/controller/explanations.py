"""Explanations as JSON: what decision records, the SRE API and `gfs explain` carry."""

from __future__ import annotations

from typing import Any

from gfs.services.core.explain import Explanation


def explanation_dict(why: Explanation) -> dict[str, Any]:
    """An explanation as JSON (decision records, the SRE API, `gfs explain`)."""

    def candidate(c: Any) -> dict[str, Any]:
        return {"node": c.node, "victims": list(c.victims), "cost": c.cost,
                "eviction_rate_term": c.eviction_rate_term, "lost_gpu_term": c.lost_gpu_term}  # fmt: skip

    out: dict[str, Any] = {"state": why.state, "message": why.message()}
    if why.queued is not None:
        out["queued"] = {
            "reason": why.queued.reason.name,
            "message": why.queued.reason.message,
            "blocked_by": why.queued.blocked_by,
            "since_pass": why.queued.since_pass,
        }
    out["preemptions"] = [
        {
            "winner": candidate(p.winner),
            "alternatives": [candidate(a) for a in p.losers],
            "considered": p.considered,
        }
        for p in why.preemptions
    ]
    last = why.last_eviction
    if last is not None:
        out["last_eviction"] = {
            "at_s": last.at_s, "node": last.node, "reason": last.reason.name, "preemptor": last.preemptor,
            "plan": None if last.preemption is None else {
                "winner": candidate(last.preemption.winner),
                "alternatives": [candidate(a) for a in last.preemption.losers],
                "considered": last.preemption.considered,
            },
        }  # fmt: skip
    return out
