"""How a live service runs its event loop (issue 37): which loop, and how the garbage collector
may pause it.

- `GFS_EVENT_LOOP`: "uvloop" (libuv's loop, the default where installed: less CPU per socket
  read, timer and callback than asyncio's pure-Python loop) or "asyncio".
- `GFS_GC_FREEZE`: after start-up, move every object alive then (modules, classes, settings,
  the imported libraries) out of the collector's reach (`gc.freeze`), so the full collections a
  busy service runs no longer walk them again and again while a batch waits.
- `GFS_GC_THRESHOLD`: the young generation's threshold (CPython's default is 700 allocations):
  a service that allocates thousands of short-lived objects per batch otherwise collects many
  times per batch. 0 keeps CPython's.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import logging
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


def run(main: Coroutine[Any, Any, None], loop: str) -> None:
    """Run `main` to completion on the loop named (`asyncio` when uvloop is not installed)."""
    if loop == "uvloop" and importlib.util.find_spec("uvloop") is not None:
        import uvloop

        uvloop.run(main)
        return
    if loop == "uvloop":
        log.warning("GFS_EVENT_LOOP=uvloop but uvloop is not installed: running asyncio's loop")
    asyncio.run(main)
