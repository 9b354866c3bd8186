"""The demo's accelerated clock: the sample replayed on the controllable clock, free-running.

On the wall clock a few-minute demo never closes a forecast hour, so the LSTM never forecasts and
the quota never follows a forecast. The services already run on the controllable clock of
schemas/clock.py (what `gfs parity run` drives); the demo drives it too, but free-running: every
`period_s` wall seconds the clock moves `step_s` seconds of the sample, and each instant t is
played as

    ADVANCE t  -> agents and virtual nodes move their workers' time (tasks due by t exit); the
                  forecast stream closes the minutes and hours before t
    the sample's submissions due by t, stamped t (through GfsClient, so the stream sees them at t)
    STATUS t   -> at every quota period crossed: the pools' status, the quota computed from it
    PASS t     -> each pool's scheduling pass at t

Unlike the parity driver it waits for no barrier (services/parity/barrier.py): nothing settles
between phases, so what the pipeline takes in wall time (a fraction of a second) is seen as that
times the speed in the sample's time; a tick coming late does not skip sample time, it only slows
the wall speed. That is what makes it a demo and not a parity run: the decisions are the live
service's at the instants its inputs arrive. One wait is kept, `gate`: the clock does not play an
instant the gate refuses. The demo's gate holds the clock while the forecast the quota uses is more
than three sample hours old (the LSTM's first forecasts of a pool cost seconds of CPU; without the
hold, on a busy machine, they arrive after the hours they forecast and the quota falls back to the
idle GPUs). A hold slows the wall speed; the time held is counted.

`plan` (pure) says what each instant holds; `run_clock` publishes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import ValidationError

from gfs.schemas.clock import ClockPhase, ClockTick
from gfs.schemas.envelope import wrap
from gfs.schemas.topics import CLOCK_TOPIC
from gfs.services.simulator.traces.records import TraceJob

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Instant:
    """One instant of the sample the clock plays: its time, the jobs submitted at it, and whether
    it crosses a quota period (STATUS)."""

    at_s: float
    submit: tuple[TraceJob, ...]
    status: bool


def plan(
    jobs: Sequence[TraceJob], *, step_s: float, status_every_s: float, end_s: float
) -> Iterator[Instant]:
    """The instants t = 0, step_s, 2 step_s, ... up to the first at or after `end_s`. A job is
    submitted at the first instant at or after its submit time; STATUS is played at t = 0 and at
    every instant whose quota period (t // status_every_s) is newer than the last one played."""
    if step_s <= 0 or status_every_s <= 0:
        raise ValueError("step_s and status_every_s must be positive")
    pending = sorted(jobs, key=lambda j: (j.submit_s, j.name))
    i, k, last_period = 0, 0, -1
    while True:
        t = k * step_s
        due = []
        while i < len(pending) and pending[i].submit_s <= t:
            due.append(pending[i])
            i += 1
        period = math.floor(t / status_every_s + 1e-9)
        yield Instant(t, tuple(due), period > last_period)
        last_period = period
        if t >= end_s and i == len(pending):
            return
        k += 1


@dataclass(slots=True)
class ClockState:
    """What the demo's view reads of the clock: the sample time played last and the submissions."""

    at_s: float = 0.0
    submitted: int = 0
    skipped: int = 0
    done: bool = False  # the whole sample was submitted and its end played
    ticks: int = 0
    late_ticks: int = 0  # instants played later than their wall slot (the machine was busy)
    held_s: float = 0.0  # wall seconds the gate held the clock
    started: float = field(default_factory=time.monotonic)


async def run_clock(
    *,
    name: str,
    base_s: float,
    jobs: Sequence[TraceJob],
    end_s: float,
    step_s: float,
    period_s: float,
    status_every_s: float,
    bootstrap: list[str] | str,
    to_task: Callable[[TraceJob], object],
    state: ClockState,
    stop: asyncio.Event,
    gate: Callable[[float], Awaitable[bool]] | None = None,
) -> None:
    """Play `plan(jobs)` on the clock `name` (t = 0 is `base_s`, epoch seconds), one instant per
    `period_s` wall seconds, until `stop`; after the sample's end it keeps ticking (the tasks still
    running finish on the clock) until `stop`. `to_task` maps a job to its TaskSubmitted (raising
    pydantic's ValidationError for a job the wire contract refuses: skipped and counted). `gate(t)`
    (sample seconds): False holds the clock before instant t until it says True (module doc)."""
    from gfs.services.platform.kafka.producer import EnvelopeProducer
    from gfs.services.producers.client import GfsClient

    now = {"t": 0.0}
    client = GfsClient(
        bootstrap_servers=bootstrap,
        producer_name="gfs-demo-clock",
        now=lambda: datetime.fromtimestamp(base_s + now["t"], UTC),
    )
    sequence = 0
    async with (
        EnvelopeProducer(bootstrap_servers=bootstrap, client_id=f"gfs-demo-clock-{name}") as producer,
        client,
    ):

        async def tick(phase: ClockPhase, t: float) -> None:
            nonlocal sequence
            sequence += 1
            at = datetime.fromtimestamp(base_s + t, UTC)
            message = ClockTick(clock=name, at=at, sequence=sequence, phase=phase)
            await producer.send(CLOCK_TOPIC, wrap(message, producer="gfs-demo-clock", occurred_at=at))

        began = time.monotonic()
        instants = plan(jobs, step_s=step_s, status_every_s=status_every_s, end_s=end_s)
        k = 0
        while not stop.is_set():
            instant = next(instants, None)
            t = instant.at_s if instant is not None else k * step_s
            if gate is not None:
                held = time.monotonic()
                while not stop.is_set() and not await gate(t):
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), timeout=0.1)
                if time.monotonic() - held > 0.05:  # a held instant: its wall slots start again
                    state.held_s += time.monotonic() - held
                    began += time.monotonic() - held
                if stop.is_set():
                    break  # stopped while held: the instant is not played
            now["t"] = t
            await tick(ClockPhase.ADVANCE, t)
            for job in instant.submit if instant is not None else ():
                try:
                    task = to_task(job)
                except ValidationError as exc:
                    state.skipped += 1
                    log.warning("demo clock: job %s skipped: %s", job.name, exc)
                    continue
                await client.submit(task)  # type: ignore[arg-type]
                state.submitted += 1
            status = instant.status if instant is not None else _crosses(t, step_s, status_every_s)
            if status:
                await tick(ClockPhase.STATUS, t)
            await tick(ClockPhase.PASS, t)
            state.at_s, state.ticks = t, state.ticks + 1
            state.done = t >= end_s and state.submitted + state.skipped == len(jobs)
            k += 1
            delay = began + k * period_s - time.monotonic()
            if delay < 0:
                state.late_ticks += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=max(0.0, delay))


def _crosses(t: float, step_s: float, every_s: float) -> bool:
    """After the plan's end: STATUS when t's quota period is newer than the previous instant's."""
    return math.floor(t / every_s + 1e-9) > math.floor((t - step_s) / every_s + 1e-9)
