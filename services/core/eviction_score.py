"""Node eviction score (spec 5.5): E = 10000 * max(0, 1 - 0.01 * 2^(0.8 n_1h + 0.2 n_1d)).

High E = few recent spot evictions on the node. Spot placement prefers high E, HP prefers low E
(nodes where spot was just evicted are likely to be reclaimed again).
"""

from __future__ import annotations

import numpy as np


def eviction_scores(evictions_1h: np.ndarray, evictions_1d: np.ndarray) -> np.ndarray:
    exponent = np.minimum(0.8 * evictions_1h + 0.2 * evictions_1d, 60.0)  # 2^60 already saturates
    score = 10000.0 * np.maximum(0.0, 1.0 - 0.01 * np.exp2(exponent))
    return np.floor(score + 1e-9).astype(np.int64)


def recent_counts(
    times: np.ndarray, nodes: np.ndarray, now: float, horizon_s: float, n_nodes: int
) -> np.ndarray:
    """Evictions per node with time in (now - horizon_s, now]."""
    mask = (times > now - horizon_s) & (times <= now)
    return np.bincount(nodes[mask], minlength=n_nodes).astype(np.float64)
