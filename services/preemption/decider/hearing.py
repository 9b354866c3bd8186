"""How far the decider has heard its input, and what that allows (liveness.py):
- a node is declared lost only for the silence the decider could hear: up to the older of how far
  its inbox partition was read and how far this instance's router has read every input
  (router/heard.py); a stretch of deafness is credited back to every node; a mass silence or the
  kill switch holds the loss (`Stats.node_loss_held`, the held instrument, a log line per change);
- reconciliation acts only while the input is current (`current`), since a lagging input holds acks
  and reports not read yet, so a command would look lost when it is not.

`Hearing` owns the port to the router's hearing (`router_heard`); what a partition heard and the
holds in force are that partition's state, handed to it per call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gfs.services.preemption import liveness
from gfs.services.preemption.decider.counters import Instruments, Stats
from gfs.services.preemption.decider.names import LOGGER
from gfs.services.preemption.decider.partition import PartitionState
from gfs.services.preemption.service_settings import PreemptionSettings

log = logging.getLogger(LOGGER)


class Hearing:
    __slots__ = ("instruments", "router_heard", "settings", "stats")

    def __init__(
        self,
        settings: PreemptionSettings,
        router_heard: Callable[[], float | None],
        stats: Stats,
        instruments: Instruments,
    ) -> None:
        self.settings = settings
        # The router of this instance has read every input sent before this time (None: not yet).
        self.router_heard = router_heard
        self.stats = stats
        self.instruments = instruments

    def note(self, state: PartitionState, caught_up_at: float | None) -> None:
        """After a fetch: the partition was read to its end as of `caught_up_at` (None: it lags,
        so it was heard only up to the newest record read)."""
        heard = caught_up_at if caught_up_at is not None else (state.newest or None)
        if heard is not None:
            state.heard = max(heard, state.heard or heard)

    def heard(self, state: PartitionState) -> float | None:
        """Every input of the partition sent before this time has been read (None: not known)."""
        router = self.router_heard()
        if state.heard is None or router is None:
            return None
        return min(state.heard, router)

    def current(self, state: PartitionState, now: float) -> bool:
        """Whether reconciliation may act: only while the input is current."""
        heard = self.heard(state)
        return heard is not None and now - heard <= self.settings.preemption_node_timeout_s

    def lost_nodes(self, state: PartitionState, now: float) -> list[tuple[str, str]]:
        """(pool, node) to mark down now, by the liveness rules (liveness.py)."""
        heard = self.heard(state)
        if heard is None:
            return []  # not known yet what was heard: a fresh owner gives every node a full timeout
        deaf = state.heard_clock.advance(heard, now)
        if deaf > 0:
            log.warning("preemption: input resumed after %.0fs deaf: node timeouts restart", deaf)
            liveness.credit(state.last_seen, deaf, heard)
        out: list[tuple[str, str]] = []
        rules = self.settings.liveness_rules()
        for pool_name, controller in state.controllers.items():
            for node in controller.nodes:
                state.last_seen.setdefault(node, now)
            verdict = liveness.judge(
                controller.nodes, controller.down, state.last_seen, heard=heard, now=now, rules=rules,
                kill_switch=controller.controls.kill_switch,
            )  # fmt: skip
            self._note_hold(state, pool_name, verdict, now - heard)
            out += [(pool_name, node) for node in verdict.lost]
        return out

    def _note_hold(
        self, state: PartitionState, pool_name: str, verdict: liveness.Verdict, lag: float
    ) -> None:
        before = state.holding.get(pool_name)
        if verdict.held == before:
            return
        if verdict.held is None:
            state.holding.pop(pool_name, None)
            log.warning("preemption: pool %s: node-loss hold (%s) ended", pool_name, before)
            return
        state.holding[pool_name] = verdict.held
        self.stats.node_loss_held += 1
        if self.instruments.held_counter is not None:
            self.instruments.held_counter.add(1, {"reason": verdict.held, "pool": pool_name})
        log.warning(
            "preemption: pool %s: %d silent node(s) NOT declared lost (%s; input lag %.1fs): %s",
            pool_name, len(verdict.silent), verdict.held, lag, ", ".join(verdict.silent),
        )  # fmt: skip
