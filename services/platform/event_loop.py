"""How a live service runs its event loop (issue 37): which loop, and how the garbage collector
may pause it.

- `GFS_EVENT_LOOP`: "asyncio" (the default) or "uvloop" (libuv's loop: less CPU per socket read,
  timer and callback in principle; three alternating runs showed no gain on the 2-core machine,
  docs/decisions.md, issue 37).
- `GFS_GC_FREEZE`: after start-up, move every object alive then (modules, classes, settings,
  the imported libraries) out of the collector's reach (`gc.freeze`), so the full collections a
  busy service runs no longer walk them again and again while a batch waits.
- `GFS_GC_THRESHOLD`: the young generation's threshold (CPython's default is 700 allocations):
  a service that allocates thousands of short-lived objects per batch otherwise collects many
  times per batch. 0 keeps CPython's.
- `GFS_GC_FULL_EVERY_S` (default 300; 0: CPython's own rule): full collections, the ones that walk
  every object the service holds, on a timer instead of whenever CPython's rule calls for one. With
  the full inventory in memory a full collection stops the loop for 80-200 ms, and CPython's rule
  ran one every 20 s or so at 45 task events/s: those pauses were the p99 of submit -> bind at low
  rates (docs/decisions.md, issue 37). The young generations are still collected as before, so
  what is left for the timer is cyclic garbage that outlived two collections: little, and bounded
  by one interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.util
import logging
import time
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


def tune_gc(freeze: bool, threshold: int) -> None:
    """Apply the collector's settings now (call it once start-up is done)."""
    if threshold > 0:
        _, second, third = gc.get_threshold()
        gc.set_threshold(threshold, second, third)
    if freeze:
        gc.collect()
        gc.freeze()


# A third threshold no count of middle-generation collections reaches: CPython then never starts a
# full collection itself (3.11: the oldest generation is collected when its count passes it).
_NEVER = 2**30


def take_over_full_collections() -> None:
    """Stop CPython's own full collections (`full_collections` runs them instead)."""
    first, second, _ = gc.get_threshold()
    gc.set_threshold(first, second, _NEVER)


async def full_collections(every_s: float, stop: asyncio.Event) -> None:
    """A full collection every `every_s` seconds until `stop`; each one's pause is logged."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=every_s)
        if stop.is_set():
            return
        began = time.perf_counter()
        found = gc.collect()
        log.info(
            "full collection: %d unreachable objects, %.0f ms", found, 1000 * (time.perf_counter() - began)
        )


def run(main: Coroutine[Any, Any, None], loop: str) -> None:
    """Run `main` to completion on the loop named (`asyncio` when uvloop is not installed)."""
    if loop == "uvloop" and importlib.util.find_spec("uvloop") is not None:
        import uvloop

        uvloop.run(main)
        return
    if loop == "uvloop":
        log.warning("GFS_EVENT_LOOP=uvloop but uvloop is not installed: running asyncio's loop")
    asyncio.run(main)
