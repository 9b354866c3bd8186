"""The services' event loop and collector settings (services/platform/event_loop.py)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from gfs.services.platform.event_loop import full_collections, run, take_over_full_collections, tune_gc
from gfs.services.platform.settings import PlatformSettings


@pytest.mark.parametrize(("name", "expected"), [("uvloop", "uvloop"), ("asyncio", "asyncio")])
def test_the_named_loop_runs_the_service(name: str, expected: str) -> None:
    seen: list[str] = []

    async def main() -> None:
        seen.append(type(asyncio.get_running_loop()).__module__.split(".")[0])

    run(main(), name)
    assert seen == [expected]


@pytest.fixture
def collector() -> Iterator[None]:
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


@pytest.mark.usefixtures("collector")
def test_tuning_freezes_what_start_up_built_and_raises_the_young_threshold() -> None:
    gc.unfreeze()
    tune_gc(freeze=True, threshold=20_000)
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold()[0] == 20_000


@pytest.mark.usefixtures("collector")
def test_zero_and_false_leave_the_collector_as_it_was() -> None:
    gc.unfreeze()
    before = gc.get_threshold()
    tune_gc(freeze=False, threshold=0)
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before


def test_the_settings_name_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GFS_EVENT_LOOP", "asyncio")
    monkeypatch.setenv("GFS_GC_FREEZE", "false")
    monkeypatch.setenv("GFS_GC_THRESHOLD", "5000")
    monkeypatch.setenv("GFS_GC_FULL_EVERY_S", "60")
    settings = PlatformSettings()
    named = (settings.gfs_event_loop, settings.gfs_gc_freeze, settings.gfs_gc_threshold)
    assert named == ("asyncio", False, 5000) and settings.gfs_gc_full_every_s == 60.0


@pytest.mark.usefixtures("collector")
def test_cpython_starts_no_full_collection_once_the_timer_owns_them() -> None:
    """Garbage in cycles that reaches the oldest generation stays until a full collection: with
    the timer in charge, CPython's own collections (any number) never run one."""
    take_over_full_collections()
    gc.collect()
    full: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info["generation"] == 2:
            full.append(info["collected"])

    gc.callbacks.append(note)
    try:
        # Objects that live on (as a service's state does) until CPython's default rule would have
        # run several full collections.
        kept: list[list[object]] = []
        for _ in range(300_000):
            cycle: list[object] = []
            cycle.append(cycle)
            kept.append(cycle)
        del kept
    finally:
        gc.callbacks.remove(note)
    assert full == []


@pytest.mark.usefixtures("collector")
def test_the_timer_runs_full_collections_until_stopped() -> None:
    full: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info["generation"] == 2:
            full.append(info["collected"])

    after_stop: list[int] = []

    async def main() -> None:
        stop = asyncio.Event()
        timer = asyncio.create_task(full_collections(0.01, stop))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30.0  # a loaded machine: the count matters, not the pace
        while len(full) < 2 and loop.time() < deadline:
            await asyncio.sleep(0.01)
        stop.set()
        await asyncio.wait_for(timer, 30.0)
        seen = len(full)
        await asyncio.sleep(0.1)
        after_stop.append(len(full) - seen)

    gc.callbacks.append(note)
    try:
        asyncio.run(main())
    finally:
        gc.callbacks.remove(note)
    assert len(full) >= 2 and after_stop == [0]
