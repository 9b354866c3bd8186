"""Where a running service's memory goes: allocation tracing on demand, off by default.

A soak run showed the quota service's resident memory still growing after 45 minutes while its own
state is bounded by windows (docs/services.md, "Soak run"); RSS alone cannot say which code holds
the memory. With `GFS_TRACEMALLOC=FRAMES` in its environment a service starts Python's
`tracemalloc` keeping FRAMES frames per allocation (1 is cheapest; more tells callers apart) and
answers SIGUSR2:

- the first signal takes the baseline snapshot and logs the traced total;
- every later one logs the traced total and the allocation sites that grew most since the baseline
  (size and count differences, grouped by the allocating line), so two signals some minutes apart
  name what accumulates rather than what start-up allocated.

`GFS_TRACEMALLOC_EVERY_S=S` reports on a timer instead (a daemon thread: the baseline S seconds
after start, then every S seconds), for a soak that nobody signals and for the Faust forecast
worker, whose SIGUSR2 belongs to its framework (mode enters a debugger on it): there the signal is
not taken. `GFS_TRACEMALLOC_TOP` (default 25) sets how many sites a report lists. Tracing slows
allocation (about 2x at one frame), so it is a diagnostic to switch on for a run, never a default.
SIGUSR2 is otherwise free in our services (node agents signal SIGUSR1 to tasks, never to
themselves).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import tracemalloc
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import FrameType

log = logging.getLogger(__name__)

ENV_FRAMES = "GFS_TRACEMALLOC"
ENV_TOP = "GFS_TRACEMALLOC_TOP"
ENV_EVERY = "GFS_TRACEMALLOC_EVERY_S"
# Allocations made by the tracing itself and by imports are noise in a growth report.
_IGNORED = (
    tracemalloc.Filter(False, tracemalloc.__file__),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
    tracemalloc.Filter(False, "<unknown>"),
)


class MemoryTraceSettingError(ValueError):
    """GFS_TRACEMALLOC or GFS_TRACEMALLOC_TOP is not a positive integer."""


def _positive(environ: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise MemoryTraceSettingError(f"{name}={raw!r}: expected a positive integer")
    return value


@dataclass(slots=True)
class MemoryTrace:
    service: str
    top: int = 25
    baseline: tracemalloc.Snapshot | None = None
    reports: list[list[str]] = field(default_factory=list)  # every report's lines, newest last
    stopped: threading.Event = field(default_factory=threading.Event)  # ends the timer's reports

    def report(self) -> list[str]:
        """The baseline on the first call; the sites that grew since it on every later one."""
        current, peak = tracemalloc.get_traced_memory()
        snapshot = tracemalloc.take_snapshot().filter_traces(_IGNORED)
        head = f"{self.service}: traced {current / 2**20:.1f} MiB (peak {peak / 2**20:.1f} MiB)"
        if self.baseline is None:
            self.baseline = snapshot
            lines = [f"{head}; baseline taken, the next SIGUSR2 reports what grew since"]
        else:
            growth = [s for s in snapshot.compare_to(self.baseline, "lineno") if s.size_diff > 0]
            lines = [f"{head}; top {min(self.top, len(growth))} sites by growth since the baseline:"]
            for stat in growth[: self.top]:
                frame = stat.traceback[0]
                lines.append(
                    f"  {stat.size_diff / 1024:+.1f} KiB {stat.count_diff:+d} blocks"
                    f" (now {stat.size / 1024:.1f} KiB) {frame.filename}:{frame.lineno}"
                )
        self.reports.append(lines)
        return lines

    def log_report(self) -> None:
        for line in self.report():
            log.warning("%s", line)

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.log_report()

    def every(self, interval_s: float) -> threading.Thread:
        """Report every `interval_s` (the first: the baseline) until `close`."""

        def loop() -> None:
            while not self.stopped.wait(interval_s) and tracemalloc.is_tracing():
                self.log_report()

        thread = threading.Thread(target=loop, name=f"memory-trace-{self.service}", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        self.stopped.set()


def install(
    service: str, environ: Mapping[str, str] | None = None, *, take_signal: bool = True
) -> MemoryTrace | None:
    """Start tracing when GFS_TRACEMALLOC is set (call from the main thread, before the service's
    work starts): SIGUSR2 reports unless `take_signal` is False, GFS_TRACEMALLOC_EVERY_S reports on
    a timer. None, and nothing changed, when it is not set."""
    environ = os.environ if environ is None else environ
    frames = _positive(environ, ENV_FRAMES, None)
    if frames is None:
        return None
    top = _positive(environ, ENV_TOP, 25)
    every_s = _positive(environ, ENV_EVERY, None)
    assert top is not None
    tracemalloc.start(frames)
    trace = MemoryTrace(service, top=top)
    how = []
    if take_signal:
        signal.signal(signal.SIGUSR2, trace.on_signal)
        how.append("send SIGUSR2 for a baseline, then again for what grew since")
    if every_s is not None:
        trace.every(float(every_s))
        how.append(f"a report every {every_s} s (the first: the baseline)")
    if not how:
        how.append(f"no report: this service leaves SIGUSR2 to its framework; set {ENV_EVERY}")
    log.warning(
        "%s: allocation tracing on (%s=%d frames; slower): %s", service, ENV_FRAMES, frames, "; ".join(how)
    )
    return trace
