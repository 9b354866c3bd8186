"""Which shared GPUs (fractional workers' slots, core/pool.py) a placement or a victim search
looks at: queries over the pool's per-GPU arrays, outside the pool's accounting."""

from __future__ import annotations

from gfs.services.core.pool import PoolState

_EPS = 1e-9


def spot_slots_on_node(pool: PoolState, node: int) -> list[int]:
    """Shared GPUs on `node` that hold spot work only (they count as non-HP GPUs)."""
    if pool.shared_on_node[node] == 0:
        return []
    lo = int(pool.node_offset[node])
    hi = lo + int(pool.node_cap[node])
    return [s for s in range(lo, hi) if pool.gpu_shared[s] and pool.gpu_hp[s] <= _EPS]


def open_slot(pool: PoolState, node: int) -> int:
    """Lowest GPU index on `node` that is not shared yet (deterministic)."""
    lo = int(pool.node_offset[node])
    for s in range(lo, lo + int(pool.node_cap[node])):
        if not pool.gpu_shared[s]:
            return s
    raise ValueError(f"node {node} has no unshared GPU")
