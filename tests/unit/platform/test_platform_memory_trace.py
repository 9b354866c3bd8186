"""Allocation tracing on demand (services/platform/memory_trace.py): off unless GFS_TRACEMALLOC is
set; the first report is a baseline, a later one names the line that allocated since."""

from __future__ import annotations

import os
import signal
import time
import tracemalloc
from collections.abc import Iterator

import pytest

from gfs.services.platform.memory_trace import MemoryTraceSettingError, install

_held: list[bytes] = []


@pytest.fixture
def clean() -> Iterator[None]:
    previous = signal.getsignal(signal.SIGUSR2)
    yield
    tracemalloc.stop()
    signal.signal(signal.SIGUSR2, previous)
    _held.clear()


def _grow() -> None:
    for _ in range(200):
        _held.append(bytes(4096))  # the growth the report must name: this line


def test_off_without_the_setting(clean: None) -> None:
    before = signal.getsignal(signal.SIGUSR2)
    assert install("svc", {}) is None
    assert not tracemalloc.is_tracing()
    assert signal.getsignal(signal.SIGUSR2) is before


def test_a_second_signal_names_the_line_that_grew(clean: None) -> None:
    trace = install("svc", {"GFS_TRACEMALLOC": "1", "GFS_TRACEMALLOC_TOP": "5"})
    assert trace is not None and tracemalloc.is_tracing()
    os.kill(os.getpid(), signal.SIGUSR2)  # the handler runs before the next bytecode
    assert len(trace.reports) == 1 and "baseline taken" in trace.reports[0][0]
    _grow()
    os.kill(os.getpid(), signal.SIGUSR2)
    assert len(trace.reports) == 2
    lines = trace.reports[1]
    assert lines[0].startswith("svc: traced") and "top" in lines[0]
    assert len(lines) <= 1 + 5
    grow_line = _grow.__code__.co_firstlineno + 2
    top = lines[1]
    assert top.endswith(f"{__file__}:{grow_line}"), lines
    # 200 blocks of 4 KiB (and a little more each): at least 800 KiB and 200 blocks more
    size_kib, _, blocks = top.split()[:3]
    assert float(size_kib) >= 800 and int(blocks) >= 200, top


def test_the_timer_reports_without_a_signal(clean: None) -> None:
    before = signal.getsignal(signal.SIGUSR2)
    trace = install("svc", {"GFS_TRACEMALLOC": "1", "GFS_TRACEMALLOC_EVERY_S": "1"}, take_signal=False)
    assert trace is not None
    assert signal.getsignal(signal.SIGUSR2) is before  # the framework's signal is left alone
    deadline = time.monotonic() + 10
    while len(trace.reports) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    trace.close()
    assert "baseline taken" in trace.reports[0][0]
    assert "top" in trace.reports[1][0]


@pytest.mark.parametrize("raw", ["0", "-1", "two", "1.5"])
def test_a_bad_setting_is_refused_clearly(clean: None, raw: str) -> None:
    with pytest.raises(MemoryTraceSettingError, match=f"GFS_TRACEMALLOC={raw!r}"):
        install("svc", {"GFS_TRACEMALLOC": raw})
    assert not tracemalloc.is_tracing()
