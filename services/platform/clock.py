"""Clocks for the service shells: the one place a service reads the time.

The pure core never reads a clock (time is an argument); the shells ask a `Clock` and pass the
value down. Production uses `SystemClock`; tests and the simulator use `ManualClock`, which
moves only when told to and never backwards, so a test cannot silently rewind time that the
code under test assumes is monotonic (guarantee periods, eviction grace deadlines).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """A source of wall-clock time."""

    def now(self) -> float:
        """Seconds since the Unix epoch (UTC), as a float."""
        ...


class ClockWentBackwardsError(ValueError):
    """A `ManualClock` was asked to move to an earlier instant."""


@dataclass(frozen=True, slots=True)
class SystemClock:
    """The host's wall clock (`time.time()`); NTP may step it, which callers must tolerate."""

    def now(self) -> float:
        return time.time()


@dataclass(slots=True, init=False, eq=False)
class ManualClock:
    """A clock that moves only by `set` or `advance`, and only forwards.

    Equal times are allowed (`advance(0)`, `set(now())`): many events share an instant in a
    simulation. Non-finite times are refused because comparisons with NaN are always false and
    would let the clock jump anywhere.
    """

    _now: float

    def __init__(self, start: float = 0.0) -> None:
        self._now = _finite(start, what="start")

    def now(self) -> float:
        return self._now

    def set(self, when: float) -> None:
        """Move to `when` (seconds since the epoch); ClockWentBackwardsError if it is earlier."""
        when = _finite(when, what="time")
        if when < self._now:
            raise ClockWentBackwardsError(
                f"ManualClock cannot go back from {self._now!r} to {when!r} ({when - self._now:+g} s)"
            )
        self._now = when

    def advance(self, seconds: float) -> float:
        """Move forward by `seconds` (>= 0) and return the new time."""
        seconds = _finite(seconds, what="step")
        if seconds < 0:
            raise ClockWentBackwardsError(f"ManualClock cannot advance by a negative step ({seconds!r} s)")
        self._now += seconds
        return self._now


def utc_datetime(clock: Clock) -> datetime:
    """The clock's time as an aware UTC datetime (what envelopes and `consume(now=...)` take)."""
    return datetime.fromtimestamp(clock.now(), tz=UTC)


def _finite(value: float, *, what: str) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"ManualClock {what} must be a finite number of seconds (got {value!r})")
    return value


@dataclass(slots=True, init=False, eq=False)
class TickClock:
    """The time of the last clock tick a service read from gfs.control.clock (schemas/clock.py).

    Services started with `--clock topic` (setting `*_clock = "topic"`) use it instead of the wall
    clock, so a driver can replay a trace at any speed and every service agrees on "now". Before
    the first tick it reads `start` (0: the epoch, earlier than any tick, so the first tick never
    looks like a step back). It never moves backwards: a tick earlier than the current time (a
    redelivery) leaves it where it is.
    """

    _now: float

    def __init__(self, start: float = 0.0) -> None:
        self._now = _finite(start, what="start")

    def now(self) -> float:
        return self._now

    def advance_to(self, when: float) -> bool:
        """Move to `when` if it is later; True if the time changed."""
        when = _finite(when, what="time")
        if when <= self._now:
            return False
        self._now = when
        return True


CLOCK_MODES = ("wall", "topic")


def check_clock_mode(mode: str) -> str:
    """A `*_clock` setting's value, checked: `wall` or `topic`."""
    if mode not in CLOCK_MODES:
        raise ValueError(f"clock mode must be one of {CLOCK_MODES}, got {mode!r}")
    return mode
