"""One periodic timer for every service: run an action now and then every `seconds` until `stop`.

Error policy (the same in every service, so an operator knows what a failing timer does): an
exception from the action is logged with its traceback and counted
(`gfs_timer_failures_total{timer=NAME}`), and the timer keeps ticking: a periodic job (a quota
refresh, a decider tick) that fails once because Postgres or the broker blinked must not end the
service, and the next tick is the retry. Exceptions listed in `fatal` are not retried: they end
the timer and propagate to whoever awaits it (the quota service's lost fence, which must step the
instance down at once). Cancellation always propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from opentelemetry.metrics import Counter, Meter

log = logging.getLogger(__name__)

FAILURES_METRIC = "gfs_timer_failures"  # a counter: exported as gfs_timer_failures_total


class FailureCounter(Protocol):
    """What the timer needs of an OpenTelemetry `Counter` (tests pass a plain recorder)."""

    def add(self, amount: int, attributes: dict[str, str] | None = None) -> None: ...


def failure_counter(meter: Meter) -> Counter:
    """The counter `every` reports failed runs on (one per process's meter; label `timer`)."""
    return meter.create_counter(
        FAILURES_METRIC, description="Runs of a periodic timer that raised (logged, retried at the next tick)"
    )


async def every(
    seconds: float,
    stop: asyncio.Event,
    action: Callable[[], Awaitable[object]],
    *,
    name: str,
    failures: FailureCounter | None = None,
    fatal: tuple[type[BaseException], ...] = (),
) -> None:
    """Await `action()` now and every `seconds` after each run ends, until `stop` is set; a failed
    run is counted on `failures` (labelled `timer=name`) and logged with how many failed so far."""
    failed = 0
    while not stop.is_set():
        try:
            await action()
        except fatal:
            raise
        except Exception:
            failed += 1
            if failures is not None:
                failures.add(1, {"timer": name})
            log.exception("timer %s failed (%d so far); next run in %.1fs", name, failed, seconds)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=seconds)
