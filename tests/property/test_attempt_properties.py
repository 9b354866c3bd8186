"""The attempt state machine (services/preemption/controller/attempts.py, docs/attempts.md) under random
interleavings of bind, start, exit, evict and ack.

Each example draws what really happened to one run on the agents' side (per worker: it exited on
its own, it was stopped by the eviction, or the agent read the eviction before the bind and never
started it), derives the messages the agents would send, and delivers them to the service in a
random order that keeps only the orders the system guarantees (a worker's start before its exit;
an eviction's ack after the eviction was decided). Whatever the order, the run must end exactly
once, and as what it was: FINISHED exactly when every worker exited on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from gfs.services.preemption.controller.attempts import NOT_RUNNING, Attempt, Phase

OWN, STOPPED, NEVER_STARTED = "own", "stopped", "never_started"


@dataclass(frozen=True)
class World:
    workers: dict[int, str]  # worker -> node
    fate: dict[int, str]  # worker -> OWN / STOPPED / NEVER_STARTED
    codes: dict[int, int]  # worker -> exit code of an own exit
    evicted: bool  # did the scheduler decide an eviction at all


@st.composite
def worlds(draw: st.DrawFn) -> World:
    n = draw(st.integers(1, 4))
    nodes = draw(st.lists(st.sampled_from(["n0", "n1", "n2"]), min_size=n, max_size=n))
    workers = dict(enumerate(nodes))
    evicted = draw(st.booleans())
    if evicted:
        fate = {w: draw(st.sampled_from([OWN, STOPPED, NEVER_STARTED])) for w in workers}
    else:
        fate = dict.fromkeys(workers, OWN)  # nothing stops a run that is not evicted
    codes = {w: draw(st.sampled_from([0, 0, 1, 137])) for w in workers}
    return World(workers, fate, codes, evicted)


def messages(world: World) -> list[tuple[str, ...]]:
    """What the agents send, per worker in their own order, plus one ack per node evicted."""
    out: list[tuple[str, ...]] = []
    for w, fate in world.fate.items():
        if fate == OWN:
            out += [("start", str(w)), ("exit", str(w), "own")]
        elif fate == STOPPED:
            out += [("start", str(w)), ("exit", str(w), "evicted")]
        else:
            out.append(("exit", str(w), "evicted"))  # the bind read after the eviction: exit 127
    if world.evicted:
        for node in sorted(set(world.workers.values())):
            on_node = [w for w, n in world.workers.items() if n == node]
            stopped_here = any(world.fate[w] == STOPPED for w in on_node)
            out.append(("ack", node, "KILLED" if stopped_here else NOT_RUNNING))
    return out


@settings(max_examples=10_000, deadline=None, derandomize=True)
@given(world=worlds(), data=st.data())
def test_every_interleaving_ends_the_run_once_and_as_what_it_was(world: World, data: st.DataObject) -> None:
    pending = messages(world)
    # A random delivery order: per worker, start before exit; every ack after the eviction.
    order: list[tuple[str, ...]] = []
    evict_at = None
    remaining = list(pending)
    while remaining:
        ready = [
            m
            for m in remaining
            if not (m[0] == "exit" and ("start", m[1]) in remaining)
            and not (m[0] == "ack" and evict_at is None)
        ]
        if world.evicted and evict_at is None and (not ready or data.draw(st.booleans())):
            evict_at = len(order)
            order.append(("evict",))
            continue
        chosen = data.draw(st.sampled_from(ready))
        remaining.remove(chosen)
        order.append(chosen)
    if world.evicted and evict_at is None:
        order.append(("evict",))

    run = Attempt(1, dict(world.workers))
    ends: list[Phase] = []
    reported_start = 0
    for message in order:
        kind = message[0]
        if kind == "start":
            reported_start += run.start(int(message[1]))
            continue
        if kind == "exit":
            w = int(message[1])
            own = message[2] == "own"
            phase = run.exit(w, world.codes[w] if own else 127, evicted=not own)
        elif kind == "evict":
            phase = run.evict(set(world.workers.values()))
        else:
            phase = run.ack(message[1], message[2])
        if phase is not None:
            ends.append(phase)
    # Everything delivered: the run has ended, once, and the deadline changes nothing after.
    assert len(ends) == 1, (order, ends)
    assert reported_start <= 1  # TaskStarted at most once per attempt
    if ends[0] is Phase.FINISHED:
        assert reported_start == 1  # a finished run was reported started first (starts precede exits)
    assert run.expire() is None and run.phase is ends[0]
    finished = all(fate == OWN for fate in world.fate.values())
    assert ends[0] is (Phase.FINISHED if finished else Phase.EVICTED), (world, order)
    if ends[0] is Phase.FINISHED:
        assert run.own_exits == {w: world.codes[w] for w in world.workers}  # no exit dropped


@settings(max_examples=2_000, deadline=None, derandomize=True)
@given(world=worlds(), cut=st.integers(0, 12))
def test_the_deadline_ends_a_run_whose_messages_are_lost_and_never_calls_a_stopped_run_finished(
    world: World, cut: int
) -> None:
    # Only the first `cut` messages arrive (in the agents' order); the rest are lost.
    run = Attempt(1, dict(world.workers))
    if world.evicted:
        run.evict(set(world.workers.values()))
    ends = [p for m in messages(world)[:cut] if (p := _deliver(run, m, world)) is not None]
    late = run.expire()
    if late is not None:
        ends.append(late)
    if world.evicted or ends:
        assert len(ends) == 1
    if ends and ends[0] is Phase.FINISHED:
        assert all(fate == OWN for fate in world.fate.values())


def _deliver(run: Attempt, message: tuple[str, ...], world: World) -> Phase | None:
    if message[0] == "start":
        run.start(int(message[1]))
        return None
    if message[0] == "exit":
        w = int(message[1])
        own = message[2] == "own"
        return run.exit(w, world.codes[w] if own else 127, evicted=not own)
    return run.ack(message[1], message[2])
