"""The platform's periodic timer: a failing run is logged with its traceback and counted, and the
timer keeps ticking; a `fatal` exception ends it; `stop` ends it between runs."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gfs.services.platform.timer import every


class Recorder:
    def __init__(self) -> None:
        self.adds: list[tuple[int, dict[str, str] | None]] = []

    def add(self, amount: int, attributes: dict[str, str] | None = None) -> None:
        self.adds.append((amount, attributes))


class FenceLost(Exception):
    pass


async def test_a_failing_run_is_logged_counted_and_the_timer_keeps_ticking(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = asyncio.Event()
    runs: list[int] = []

    async def action() -> None:
        runs.append(len(runs) + 1)
        if len(runs) in (1, 3):  # runs 1 and 3 fail, run 4 asks to stop
            raise RuntimeError(f"postgres blinked ({len(runs)})")
        if len(runs) == 4:
            stop.set()

    counter = Recorder()
    with caplog.at_level(logging.ERROR, logger="gfs.services.platform.timer"):
        await asyncio.wait_for(every(0.0, stop, action, name="refresh", failures=counter), 5.0)

    assert runs == [1, 2, 3, 4]
    assert counter.adds == [(1, {"timer": "refresh"}), (1, {"timer": "refresh"})]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2
    assert all(r.exc_info is not None for r in errors)  # the traceback, not just the message
    assert "refresh" in errors[0].getMessage()
    assert "postgres blinked (3)" in str(errors[1].exc_info[1])  # type: ignore[index]


async def test_a_fatal_exception_ends_the_timer_and_propagates() -> None:
    stop = asyncio.Event()
    runs = 0

    async def action() -> None:
        nonlocal runs
        runs += 1
        if runs == 2:
            raise FenceLost("another instance holds the fence")

    counter = Recorder()
    with pytest.raises(FenceLost):
        await asyncio.wait_for(
            every(0.0, stop, action, name="refresh", failures=counter, fatal=(FenceLost,)), 5.0
        )
    assert runs == 2
    assert counter.adds == []  # a fatal exception is not a timer failure: the caller handles it


async def test_stop_ends_the_wait_between_runs() -> None:
    stop = asyncio.Event()
    runs = 0

    async def action() -> None:
        nonlocal runs
        runs += 1

    task = asyncio.create_task(every(3600.0, stop, action, name="slow"))
    await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, 1.0)
    assert runs == 1
