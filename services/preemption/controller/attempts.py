"""One run of a task (an attempt) as a state machine: how bind, start, exit, evict and ack end it.

Pure (no I/O, no clock, no schemas): the controller feeds it what the agents report and reads
`end` to know whether the run finished on its own or was evicted. The table it implements is
docs/attempts.md; tests/property/test_attempt_properties.py plays random interleavings of the
same events against that table.

Why a state machine: acks travel on several topics and race each other. A worker can exit 0 on
its own while its eviction is in flight (the agent then answers NOT_RUNNING); the exit and the
ack may reach the service in either order. The run must end exactly once, and as what it really
was: a run whose every worker exited on its own *finished*, even if an eviction was issued (no
TaskEvicted, no failed guarantee period, no requeue), and a late exit of the run is never lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Phase(StrEnum):
    BOUND = "BOUND"  # binds issued, not every worker started yet
    RUNNING = "RUNNING"  # every worker reported WorkerStarted
    EVICTING = "EVICTING"  # eviction commands issued, the run's end not known yet
    FINISHED = "FINISHED"  # every worker exited on its own (terminal)
    EVICTED = "EVICTED"  # stopped by the eviction, or never started (terminal)


TERMINAL = frozenset({Phase.FINISHED, Phase.EVICTED})
NOT_RUNNING = "NOT_RUNNING"  # the one ack outcome that says "nothing of it ran here"


@dataclass(slots=True)
class Attempt:
    """One attempt of one task: its workers (index -> node) and what was reported about them."""

    number: int
    workers: dict[int, str]
    phase: Phase = Phase.BOUND
    started: set[int] = field(default_factory=set)
    own_exits: dict[int, int] = field(default_factory=dict)  # worker -> exit code (on its own)
    stopped: set[int] = field(default_factory=set)  # workers the eviction stopped or never started
    evicting: set[str] = field(default_factory=set)  # nodes an eviction was sent to
    acks: dict[str, str] = field(default_factory=dict)  # node -> ack outcome

    @property
    def ended(self) -> bool:
        return self.phase in TERMINAL

    def start(self, worker: int) -> bool:
        """WorkerStarted. True when this made every worker started (TaskStarted is due), also
        while EVICTING: a start read after the eviction was decided still happened, and the run
        may yet finish on its own."""
        if self.ended or worker not in self.workers or worker in self.started:
            return False
        self.started.add(worker)
        if len(self.started) < len(self.workers):
            return False
        if self.phase is Phase.BOUND:
            self.phase = Phase.RUNNING
        return True

    def exit(self, worker: int, code: int, *, evicted: bool) -> Phase | None:
        """WorkerExited. The phase the run ended in with this exit, or None (not ended by it)."""
        if self.ended or worker not in self.workers or worker in self.own_exits or worker in self.stopped:
            return None
        if evicted:
            self.stopped.add(worker)
        else:
            self.own_exits[worker] = code
        return self._settle()

    def evict(self, nodes: set[str]) -> Phase | None:
        """The scheduler took the run's GPUs: eviction commands went to `nodes`."""
        if self.ended:
            return None
        self.phase = Phase.EVICTING
        self.evicting |= nodes
        return self._settle()

    def ack(self, node: str, outcome: str) -> Phase | None:
        """An EvictAck from `node` (already checked to answer this run's eviction)."""
        if self.phase is not Phase.EVICTING or node not in self.evicting or node in self.acks:
            return None
        self.acks[node] = outcome
        return self._settle()

    def expire(self) -> Phase | None:
        """The grace period plus margin passed: what is known decides (the agent has killed
        whatever still ran). A run whose every worker exited on its own finished; any other
        evicted run was evicted."""
        if self.phase is not Phase.EVICTING:
            return None
        self.phase = Phase.FINISHED if self._all_own() else Phase.EVICTED
        return self.phase

    def lose(self) -> Phase | None:
        """The run's node is lost: it is reported evicted now (a late word changes nothing)."""
        if self.ended:
            return None
        self.phase = Phase.EVICTED
        return self.phase

    # ----- internals -------------------------------------------------------------------------
    def _all_own(self) -> bool:
        return len(self.own_exits) == len(self.workers)

    def _settle(self) -> Phase | None:
        if self._all_own():  # every worker finished on its own: whatever was in flight, it finished
            self.phase = Phase.FINISHED
            return self.phase
        if self.phase is not Phase.EVICTING or set(self.acks) != self.evicting:
            return None  # not evicting, or an ack still in flight
        for node, outcome in self.acks.items():
            if outcome != NOT_RUNNING:
                continue
            # "Nothing ran here": either its workers exited (on their own, or were never started
            # because the eviction came first) and those exits are on their way, or were seen.
            # Wait for them rather than guess; `expire` decides if they never come.
            on_node = [w for w, n in self.workers.items() if n == node]
            if any(w not in self.own_exits and w not in self.stopped for w in on_node):
                return None
        self.phase = Phase.EVICTED
        return self.phase
