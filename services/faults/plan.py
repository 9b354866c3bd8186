"""What a fault run is asked to do (`FaultPlan`: load, kills, outages, bounds) and what it found
(`Report`: the promises checked, the faults injected, the soak intervals); services/faults/harness.py
runs it."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class FaultPlan:
    kills_per_service: int = 2
    # Whether one agent is among the services killed (off: with a node timeout shorter than an
    # agent's restart, its kill would rightly be a lost node, and the run checks that none is).
    kill_agents: bool = True
    agents: int = 3
    gpus_per_agent: int = 4
    outage_s: float = 10.0
    outage_of: tuple[str, ...] = ("broker", "postgres")  # which parts of the stack go down
    node_timeout_s: float = 60.0  # the preemption service's: an outage longer than it must evict nothing
    load_s: float = 120.0
    rate: float = 0.4  # task submissions per second (about 3/4 of the GPUs busy on average)
    settle_s: float = 40.0
    seed: int = 0
    # The soak run (soak.py): > 0 replaces the fault schedule by a kill of the preemption service
    # every `kill_every_s` for `soak_s` seconds of load, sampled every `sample_s`.
    soak_s: float = 0.0
    kill_every_s: float = 600.0
    sample_s: float = 60.0
    report_every_s: float = 3600.0


@dataclass(slots=True)
class Report:
    plan: FaultPlan
    run: str
    submitted: int = 0
    submit_failures: Counter[str] = field(default_factory=Counter)
    accepted: int = 0
    finished: int = 0
    binds: int = 0
    evictions: int = 0
    # Why the evictions happened (EvictCommand.reason): a preemption by HP is the scheduler doing
    # its job; a NODE_LOST during an outage would be a stall taken for a failure.
    evictions_by_reason: Counter[str] = field(default_factory=Counter)
    lost: list[str] = field(default_factory=list)
    evicted_twice: list[str] = field(default_factory=list)
    on_two_nodes: list[str] = field(default_factory=list)
    ledger_missing: int = 0
    ledger_extra: int = 0
    not_ready: list[str] = field(default_factory=list)
    kills: dict[str, int] = field(default_factory=dict)
    exits: dict[str, int] = field(default_factory=dict)
    outages: list[str] = field(default_factory=list)
    recovery_s: dict[str, float] = field(default_factory=dict)
    soak: list[dict[str, Any]] = field(default_factory=list)  # soak.summarize's intervals
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.evicted_twice or self.on_two_nodes or self.ledger_missing
                    or self.ledger_extra or self.not_ready)  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "plan": asdict(self.plan),
            "submitted": self.submitted,
            "submit_failures": dict(self.submit_failures),
            "accepted": self.accepted,
            "finished": self.finished,
            "binds": self.binds,
            "evictions": self.evictions,
            "evictions_by_reason": dict(self.evictions_by_reason),
            "lost": self.lost,
            "evicted_twice": self.evicted_twice,
            "on_two_nodes": self.on_two_nodes,
            "ledger_missing": self.ledger_missing,
            "ledger_extra": self.ledger_extra,
            "not_ready": self.not_ready,
            "kills": self.kills,
            "exits": self.exits,
            "outages": self.outages,
            "recovery_s": self.recovery_s,
            "soak": self.soak,
            "wall_s": round(self.wall_s, 1),
            "ok": self.ok,
        }
