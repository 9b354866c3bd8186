"""Clocks: the system clock reads the host time; the manual clock moves only forwards."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gfs.services.platform.clock import Clock, ClockWentBackwardsError, ManualClock, SystemClock, utc_datetime


@pytest.mark.parametrize("clock", [SystemClock(), ManualClock(5.0)], ids=["system", "manual"])
def test_both_clocks_satisfy_the_protocol(clock: Clock) -> None:
    assert isinstance(clock, Clock)
    assert isinstance(clock.now(), float)


def test_system_clock_reads_the_host_time() -> None:
    before = time.time()
    read = SystemClock().now()
    after = time.time()
    assert before <= read <= after


def test_manual_clock_starts_where_told_and_stays_there() -> None:
    clock = ManualClock(1_000.0)
    assert clock.now() == clock.now() == 1_000.0
    assert ManualClock().now() == 0.0


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        # (start 100.0) + 0.5 + 0 + 2.5 = 103.0, exact in binary floating point.
        pytest.param([("advance", 0.5), ("advance", 0.0), ("advance", 2.5)], 103.0, id="advances"),
        pytest.param([("set", 150.0), ("set", 150.0)], 150.0, id="set-twice-to-same-instant"),
        # set 200, then +60 = 260, then set 3600.
        pytest.param([("set", 200.0), ("advance", 60.0), ("set", 3_600.0)], 3_600.0, id="mixed"),
    ],
)
def test_manual_clock_moves_forward(steps: list[tuple[str, float]], expected: float) -> None:
    clock = ManualClock(100.0)
    for method, value in steps:
        getattr(clock, method)(value)
    assert clock.now() == expected


def test_advance_returns_the_new_time() -> None:
    assert ManualClock(10.0).advance(2.0) == 12.0


@pytest.mark.parametrize(
    ("method", "value", "error", "message"),
    [
        pytest.param(
            "set", 99.0, ClockWentBackwardsError, "cannot go back from 100.0 to 99.0", id="set-earlier"
        ),
        pytest.param("set", 100.0 - 1e-9, ClockWentBackwardsError, "cannot go back", id="set-a-hair-earlier"),
        pytest.param("advance", -1.0, ClockWentBackwardsError, "negative step", id="negative-advance"),
        pytest.param("set", math.nan, ValueError, "finite", id="set-nan"),
        pytest.param("set", math.inf, ValueError, "finite", id="set-inf"),
        pytest.param("advance", math.nan, ValueError, "finite", id="advance-nan"),
    ],
)
def test_manual_clock_refuses_to_go_back_or_to_leave_the_number_line(
    method: str, value: float, error: type[Exception], message: str
) -> None:
    clock = ManualClock(100.0)
    with pytest.raises(error, match=message):
        getattr(clock, method)(value)
    assert clock.now() == 100.0  # a refused move leaves the clock where it was


def test_manual_clock_refuses_a_non_finite_start() -> None:
    with pytest.raises(ValueError, match="finite"):
        ManualClock(math.inf)


def test_backwards_error_is_a_value_error() -> None:
    # Callers that validate inputs generically (except ValueError) also catch a rewind.
    assert issubclass(ClockWentBackwardsError, ValueError)


def test_utc_datetime_converts_epoch_seconds() -> None:
    # 1_772_366_400 s = 20513 days * 86400 s + 12 h * 3600 s; day 20513 after 1970-01-01 is
    # 2026-03-01 (56 years incl. 14 leap days = 20454 days to 2026-01-01, + 31 + 28 = 20513).
    assert utc_datetime(ManualClock(1_772_366_400.0)) == datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


moves = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)),
        st.tuples(st.just("set"), st.floats(min_value=-1e9, max_value=1e9, allow_nan=False)),
    ),
    max_size=30,
)


@given(moves=moves)
def test_manual_clock_never_goes_backwards_whatever_it_is_asked(moves: list[tuple[str, float]]) -> None:
    clock = ManualClock(0.0)
    previous = clock.now()
    for method, value in moves:
        refused = (method == "advance" and value < 0) or (method == "set" and value < previous)
        if refused:
            with pytest.raises(ClockWentBackwardsError):
                getattr(clock, method)(value)
        else:
            getattr(clock, method)(value)
        assert clock.now() >= previous
        if method == "set" and not refused:
            assert clock.now() == value
        previous = clock.now()
