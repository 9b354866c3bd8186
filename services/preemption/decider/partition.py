"""One inbox partition as the decider holds it, and the partitions it holds.

`PartitionState` is the explicit per-partition context every part of the decider is handed: the
claim (epoch) it holds the partition under, the partition's pools (their controllers), the offset
to read next, and what it heard (node heartbeats, how far the inbox was read, the node-loss holds).
It owns those fields; the parts change them only for the state they were given.

`OwnedPartitions` is the registry of the states this instance holds now: a claim adds one
(claims.py); giving the partition up, a newer owner's fence or a failed commit removes it. It is
written only under the decider's lock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from dataclasses import dataclass, field

from gfs.services.preemption import liveness
from gfs.services.preemption.controller.ids import id_salt
from gfs.services.preemption.controller.pool import PoolController
from gfs.services.preemption.decider.counters import Stats
from gfs.services.preemption.decider.names import LOGGER
from gfs.services.preemption.journal import store
from gfs.services.preemption.service_settings import PreemptionSettings

log = logging.getLogger(LOGGER)


@dataclass(slots=True)
class PartitionState:
    claim: store.Claim
    controllers: dict[str, PoolController] = field(default_factory=dict)
    last_seen: dict[str, float] = field(default_factory=dict)  # node -> last heartbeat (memory only)
    next_offset: int = 0
    # The inbox read up to: every record sent before `heard` has been read (None: not known yet);
    # `newest` is the newest inbox record's timestamp read (liveness.py).
    heard: float | None = None
    newest: float = 0.0
    heard_clock: liveness.HeardClock = field(default_factory=liveness.HeardClock)
    holding: dict[str, str] = field(default_factory=dict)  # pool -> why its silent nodes are kept
    # Journal rows since the last snapshot (or the claim), and when that was (monotonic).
    unsnapped: int = 0
    snapped_at: float = field(default_factory=time.monotonic)
    replayed: int = 0  # journal rows the claim replayed (after the snapshot it restored, if any)

    def controller(self, pool: str, settings: PreemptionSettings) -> PoolController:
        """`pool`'s controller, made on the pool's first record; its new command ids are salted
        with this claim's epoch, so they never repeat an earlier owner's."""
        found = self.controllers.get(pool)
        if found is None:
            found = self.controllers[pool] = PoolController(pool, settings.controller_settings())
            found.id_salt = id_salt(self.claim.epoch)
        return found

    def pool_of_task(self, task_id: str) -> str:
        """The pool that has seen `task_id` ("" if none)."""
        for name, controller in self.controllers.items():
            if task_id in controller.seen:
                return name
        return ""


class OwnedPartitions(Mapping[int, PartitionState]):
    """partition -> its state, for the inbox partitions this instance holds now (read as a
    mapping; changed only through `hold`, `release` and `fenced`)."""

    __slots__ = ("_instance", "_states", "_stats")

    def __init__(self, instance: str, stats: Stats) -> None:
        self._states: dict[int, PartitionState] = {}
        self._instance = instance
        self._stats = stats

    # ----- read: a mapping (the dict's own views; membership is asked per record by the handoff) -
    def __getitem__(self, partition: int) -> PartitionState:
        return self._states[partition]

    def __iter__(self) -> Iterator[int]:
        return iter(self._states)

    def __len__(self) -> int:
        return len(self._states)

    def __contains__(self, partition: object) -> bool:
        return partition in self._states

    def keys(self) -> KeysView[int]:
        return self._states.keys()

    def values(self) -> ValuesView[PartitionState]:
        return self._states.values()

    def items(self) -> ItemsView[int, PartitionState]:
        return self._states.items()

    def pools(self) -> dict[str, PoolController]:
        """Every pool of every partition held: pool -> its controller."""
        return {name: c for s in self._states.values() for name, c in s.controllers.items()}

    # ----- write: under the decider's lock ----------------------------------------------------------
    def hold(self, state: PartitionState) -> None:
        """A claim rebuilt `state`: the partition is held from now on."""
        self._states[state.claim.partition] = state

    def release(self, partition: int) -> PartitionState | None:
        """Forget `partition` (given up, or memory ran ahead of Postgres: the next claim rebuilds
        it); its state, if it was held."""
        return self._states.pop(partition, None)

    def fenced(self, state: PartitionState) -> None:
        """Another instance claimed the partition (a newer epoch): drop it."""
        self._stats.fenced += 1
        log.error("preemption %s: partition %d was claimed by another instance; dropping it",
                  self._instance, state.claim.partition)  # fmt: skip
        self._states.pop(state.claim.partition, None)
