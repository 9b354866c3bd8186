"""A pool's eviction scores (spec 5.5) and the best-fit composite keys derived from them (spec
5.1, `placement.BestFit`), kept exact as the pool's GPU accounting changes.

Why cached: a placement reads a key per node; recomputing it over all nodes for every placement
was the placement's main cost, so the pool builds each key on first use and then shifts the one
node an accounting change touches (`shift`, `shift_hp`). `PoolState` owns the arrays the keys are
computed from and tells this object of every change; this object owns the scores and the keys.
"""

from __future__ import annotations

import numpy as np

from gfs.services.core.task import TaskClass

DEFAULT_EVICTION_SCORE = 9900  # spec 5.5 with no recent evictions: 10000 * (1 - 0.01 * 2^0)


class FitKeys:
    __slots__ = ("_ties", "_unit", "keys", "scores")

    def __init__(self, nodes: int) -> None:
        self.scores = np.full(nodes, DEFAULT_EVICTION_SCORE, dtype=np.int64)
        self._ties: dict[bool, np.ndarray] = {}
        # Per class, the key as last built (empty until a placement asks): read it, never change it.
        self.keys: dict[TaskClass, np.ndarray] = {}
        self._unit = 10001 * nodes

    def grow(self) -> None:
        """A node appended (default score): both caches scale with the node count, so they are
        rebuilt on next use."""
        self.scores = np.append(self.scores, np.int64(DEFAULT_EVICTION_SCORE))
        self._unit = 10001 * len(self.scores)
        self._ties.clear()
        self.keys.clear()

    def set_scores(self, scores: np.ndarray) -> None:
        self.scores = np.asarray(scores, dtype=np.int64)
        self._ties.clear()
        self.keys.clear()

    def forget_keys(self) -> None:
        """The accounting was rebuilt from scratch (the pool emptied): build the keys again."""
        self.keys = {}

    def tie_key(self, node_index: np.ndarray, *, prefer_high_score: bool) -> np.ndarray:
        """(eviction-score key) * n_nodes + node index, cached until the scores change: the low
        tiers of the best-fit composite key."""
        key = self._ties.get(prefer_high_score)
        if key is None:
            e = 10000 - self.scores if prefer_high_score else self.scores
            key = e * len(self.scores) + node_index
            self._ties[prefer_high_score] = key
        return key

    def best_fit_key(
        self,
        cls: TaskClass,
        free: np.ndarray,
        hp_gpus: np.ndarray,
        spot_gpus: np.ndarray,
        node_index: np.ndarray,
    ) -> np.ndarray:
        """Per node: ((free + 1) * 100 - GPUs of class `cls`) * 10001 * n_nodes + tie_key."""
        key = self.keys.get(cls)
        if key is None:
            exist = hp_gpus if cls is TaskClass.HP else spot_gpus
            score = (free + 1) * 100 - exist
            key = score * self._unit + self.tie_key(node_index, prefer_high_score=cls is TaskClass.SPOT)
            self.keys[cls] = key
        return key

    def shift(self, node: int, free_delta: int, cls: TaskClass | None, class_delta: int) -> None:
        """Keep the keys exact after `free[node] += free_delta` and `<cls>_gpus[node] += class_delta`."""
        unit = self._unit
        for key_cls, key in self.keys.items():
            delta = free_delta * 100 - (class_delta if key_cls is cls else 0)
            if delta:
                key[node] += delta * unit

    def shift_hp(self, nodes: np.ndarray, gpus: np.ndarray) -> None:
        """`shift(node, -g, HP, g)` for many distinct nodes in one numpy step (a pass's holds)."""
        unit = self._unit
        for key_cls, key in self.keys.items():
            per_gpu = -100 - (1 if key_cls is TaskClass.HP else 0)
            key[nodes] += gpus * (per_gpu * unit)
