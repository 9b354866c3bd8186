"""The policy protocol: a policy is a named bundle of four replaceable pieces.

- `hp_order` / `spot_order` (QueueOrder): bucket, in-bucket order, and the `failed` threshold;
- `placement` (NodeChooser): which node a worker goes to without preemption;
- `victims` (VictimSelector): preemptive placement of an HP worker (which spot tasks to evict);
- `quota` (QuotaPolicy): the spot admission cap per pool, refreshed every 300 s.

A new policy (k8s-priority, lyra, fgd, `<baseline>+gfs-quota`, the GFS ablations) is one module
that builds a `SchedulingPolicy` from existing or new pieces, plus one line in the registry.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gfs.services.core.placement import NodeChooser
from gfs.services.core.queues import QueueOrder
from gfs.services.core.quota import ForecastQuota, QuotaPolicy, QuotaSettings
from gfs.services.core.victims import VictimSelector


@dataclass(frozen=True, slots=True)
class SchedulingPolicy:
    name: str
    hp_order: QueueOrder
    spot_order: QueueOrder
    placement: NodeChooser
    victims: VictimSelector
    quota: QuotaPolicy
    use_eviction_scores: bool = True  # refresh node eviction scores (spec 5.5) for placement
    # Lease-based policies (Chronus): every `lease_s` all running tasks give their GPUs back and are
    # scheduled again (services/simulator/lease.py). None: no leases.
    lease_s: float | None = None
    # Head-of-queue reservations (services/core/reservation.py): an HP task that has waited this
    # long gets nodes reserved for it. None: no reservations (head-of-line blocking queues need none).
    reserve_after_s: float | None = None
    # Issue 35: while a reservation's holder waits for HP work on its nodes to end, spot may run on
    # the reserved nodes' idle GPUs (only where it fits nowhere else); the holder, tried first on
    # every pass, evicts it when it can start. False: the idle GPUs are held empty (issue 21).
    lend_reserved: bool = True
    # Issue 35: the GPUs the servable HP queue is expected to take within the period (core/
    # servable.py's claims) are kept from spot: "hard" always, "soft" while spot fits anywhere
    # else, "off" not at all.
    spot_claims: str = "off"
    # Issue 35: while the reservation is lent, spot goes to its nodes first (only the holder may
    # take them, and it cannot within the period) and keeps the other nodes' idle GPUs for the HP
    # that arrives; False: other nodes first, the reserved ones only when nothing else fits (gfs
    # sets it: policies/gfs.py).
    lend_first: bool = False

    def __post_init__(self) -> None:
        if self.spot_claims not in ("hard", "soft", "off"):
            raise ValueError(f"spot_claims must be hard, soft or off, got {self.spot_claims!r}")


def with_gfs_quota(policy: SchedulingPolicy, settings: QuotaSettings | None = None) -> SchedulingPolicy:
    """`<baseline>+gfs-quota`: the baseline unchanged except for GFS's forecast spot quota (spec
    6.2), to separate what the quota does from what the rest of GFS does."""
    quota = ForecastQuota(settings=settings or QuotaSettings())
    return replace(policy, name=f"{policy.name}+gfs-quota", quota=quota)
