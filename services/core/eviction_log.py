"""Recent spot evictions per node, behind the node eviction scores (spec 5.5)."""

from __future__ import annotations

import numpy as np

from gfs.services.core.eviction_score import eviction_scores, recent_counts

DAY_S = 86400.0
HOUR_S = 3600.0


class EvictionLog:
    def __init__(self) -> None:
        self._times: list[float] = []
        self._nodes: list[int] = []
        self._scores_set = False  # the scores last computed differ from the default

    def record(self, now: float, node: int) -> None:
        self._times.append(now)
        self._nodes.append(node)

    def __len__(self) -> int:
        return len(self._times)

    def refresh(self, now: float, n_nodes: int) -> np.ndarray | None:
        """New per-node scores from the evictions of the last hour and day, or None when nothing
        changed (no eviction in the last day and the scores are already the default). Evictions
        older than a day are forgotten."""
        if not self._times and not self._scores_set:
            return None
        times = np.asarray(self._times, dtype=np.float64)
        nodes = np.asarray(self._nodes, dtype=np.int64)
        keep = times > now - DAY_S
        self._times = times[keep].tolist()
        self._nodes = nodes[keep].tolist()
        n1h = recent_counts(times, nodes, now, HOUR_S, n_nodes)
        n1d = recent_counts(times, nodes, now, DAY_S, n_nodes)
        self._scores_set = bool(self._times)
        return eviction_scores(n1h, n1d)
