"""Node liveness: when a silent node is lost, and when the silence is the service's own deafness.

A node's telemetry is its heartbeat. Declaring a node lost stops every task on it (NODE_LOST, no
grace), so the rules below make sure a stall of the pipeline (a broker outage, a lagging or paused
consumer) is never read as a failure of the nodes (docs/decisions.md, "Stalls are not failures"):

- Freshness comes from the node's own `sampled_at`, bounded by the time the service's router
  forwarded the record (the inbox record's timestamp, a service clock): a node whose clock runs
  ahead cannot stretch its life past that, and one whose clock runs behind is taken as at most
  `max_skew_s` old at that moment (`freshness`). Processing a backlog late does not make a node
  look fresher than it was, and a lagging router does not make it look older.
- Silence is measured against what the service has heard, not against the wall clock: `heard` is
  the time up to which every input has been read (a consumer that is caught up heard everything
  up to its last fetch; a lagging one only up to the newest record it read). While the input
  stalls, `heard` stands still and so does every node's silence. When the input resumes, the time
  it was deaf is credited to every node (`HeardClock`), so the nodes get their timeout again from
  the moment the service can hear them, instead of all being found silent at once.
- While the service's own input lags more than the node timeout, nobody is declared lost
  (`INPUT_LAG`).
- When more than `mass_share` of a pool's live nodes (and at least two) went silent together, none
  of them is declared lost (`MASS_SILENCE`): that is a network or pipeline fault far more often than
  a simultaneous death, as in Kubernetes' unhealthy-zone rule. It holds until fewer are silent or
  an SRE acts; the hold is logged and counted (`gfs_preemption_node_loss_held`).
- The SRE kill switch also stops NODE_LOST (`KILL_SWITCH`): it means "no preemption at all".

Pure functions and small state only: the I/O (consumer positions, the timer) is in service.py and
the decider's hearing.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

INPUT_LAG, MASS_SILENCE, KILL_SWITCH = "input_lag", "mass_silence", "kill_switch"

# How far the input may trail the wall clock in normal operation (fetch waits, the decider's loop,
# a timer tick) before the time it trails by counts as deafness to credit back to the nodes.
STALL_TOLERANCE_S = 3.0


@dataclass(frozen=True, slots=True)
class LivenessRules:
    timeout_s: float
    max_skew_s: float = 10.0
    mass_share: float = 0.55


def freshness(sampled_at: float, received: float, max_skew_s: float) -> float:
    """When the node was last known alive: its `sampled_at`, clamped to
    [received - max_skew_s, received] (`received`: when the service's router forwarded it)."""
    return min(received, max(sampled_at, received - max_skew_s))


@dataclass(slots=True)
class HeardClock:
    """Tracks how far the input trails the wall clock, tick to tick; `advance` returns the deaf
    time to credit to every node when a stall ends (the part of the lag that went away)."""

    lag: float | None = None

    def advance(self, heard: float, now: float) -> float:
        lag = max(0.0, now - heard)
        before, self.lag = self.lag, lag
        if before is None or before <= STALL_TOLERANCE_S:
            return 0.0
        return max(0.0, before - max(lag, STALL_TOLERANCE_S))


def credit(last_seen: dict[str, float], deaf_s: float, heard: float) -> None:
    """Move every node's freshness forward by the time the service could not hear it (never past
    `heard`, never backwards)."""
    if deaf_s <= 0:
        return
    for node, seen in last_seen.items():
        last_seen[node] = max(seen, min(seen + deaf_s, heard))


@dataclass(frozen=True, slots=True)
class Verdict:
    lost: tuple[str, ...] = ()  # to mark down now
    silent: tuple[str, ...] = ()  # silent past the timeout against what was heard
    held: str | None = None  # why `silent` is not lost: INPUT_LAG, MASS_SILENCE or KILL_SWITCH


def judge(
    nodes: Iterable[str],
    down: Iterable[str],
    last_seen: Mapping[str, float],
    *,
    heard: float,
    now: float,
    rules: LivenessRules,
    kill_switch: bool = False,
) -> Verdict:
    """Which of a pool's live nodes are lost at `now`, given the input heard up to `heard`."""
    gone = set(down)
    live = sorted(n for n in nodes if n not in gone)
    if now - heard > rules.timeout_s:
        # Deaf for longer than the timeout: the wall clock would call these silent, not the input.
        silent = tuple(n for n in live if now - last_seen.get(n, now) > rules.timeout_s)
        return Verdict((), silent, INPUT_LAG if silent else None)
    silent = tuple(n for n in live if heard - last_seen.get(n, heard) > rules.timeout_s)
    if not silent:
        return Verdict()
    if kill_switch:
        return Verdict((), silent, KILL_SWITCH)
    if len(silent) >= 2 and len(silent) > rules.mass_share * len(live):
        return Verdict((), silent, MASS_SILENCE)
    return Verdict(silent, silent, None)
