"""Placeholders: idle GPUs held for HP inside a scheduling pass, so nothing is placed there (a
reservation's nodes, the servable HP queue's claims, the nodes spot must leave free); the pass's
rollback gives them back with everything else it did.

A hold is not a task: one per purpose, however many nodes it covers, accounted by the pool in one
numpy step (`PoolState.hold`). A wide reservation or a long queue's claims span hundreds of nodes
and are held, lifted and held again on every pass; a placeholder task per node made that
bookkeeping the simulator's largest cost (issue 37). While held they count as HP of their tenant
("reservation", "servable-claim"), as those placeholder tasks did.
"""

from __future__ import annotations

import numpy as np

from gfs.services.core.ids import TenantId
from gfs.services.core.pool import PoolState
from gfs.services.core.pool_journal import Hold


def hold(pool: PoolState, name: str, tenant: str, gpus: np.ndarray) -> bool:
    """Hold `gpus[node]` whole GPUs on every node where that is above 0 (the caller makes sure
    they are idle), as `name`. False: nothing to hold, nothing changed."""
    nodes = np.flatnonzero(gpus > 0)
    if len(nodes) == 0:
        return False
    amounts = gpus[nodes].astype(np.int64)
    pool.hold(Hold(name, TenantId(tenant), nodes, amounts, float(amounts.sum())))
    return True


def lift(pool: PoolState, name: str) -> None:
    """Give back the hold `name` if it is held."""
    if name in pool.holds:
        pool.unhold(name)
