"""The services' event loop and collector settings (services/platform/event_loop.py)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from gfs.services.platform.event_loop import run, tune_gc
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
    settings = PlatformSettings()
    named = (settings.gfs_event_loop, settings.gfs_gc_freeze, settings.gfs_gc_threshold)
    assert named == ("asyncio", False, 5000)
