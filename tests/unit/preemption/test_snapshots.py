"""Snapshots of a partition's pools (issue 25, services/preemption/journal/snapshots.py): a controller
restored from a snapshot and fed the rest of the journal decides exactly what the controller that
lived through the whole journal decides; a snapshot written by other code or other settings is
refused (the claim then replays the whole journal)."""

from __future__ import annotations

import pickle
import sys
from datetime import UTC, datetime
from typing import Any

import pytest

from gfs.schemas.commands import BindCommand
from gfs.schemas.quota import GuaranteeQuota, SpotQuota
from gfs.schemas.tasks import TaskClass, TaskSubmitted
from gfs.schemas.workers import WorkerStarted
from gfs.services.preemption.controller.pool import PoolController
from gfs.services.preemption.controller.settings import ControllerSettings
from gfs.services.preemption.controller.types import Effects
from gfs.services.preemption.journal import snapshots
from gfs.services.preemption.journal.entries import NodeSeenEntry, ScheduleEntry, TickEntry
from gfs.services.preemption.journal.inputs import Entry, apply, entry_for

T0 = 1_800_000_000.0
SETTINGS = ControllerSettings(grace_s=30.0, ack_margin_s=10.0)


def _quota() -> SpotQuota:
    return SpotQuota(
        pool="A100", quotas=tuple(GuaranteeQuota(guarantee_hours=h, quota_gpus=4.0) for h in (1, 2, 4)),
        eta=1.0, capacity_gpus=8, valid_from=datetime.fromtimestamp(T0, UTC),
        valid_until=datetime.fromtimestamp(T0 + 86400, UTC), forecast_version="m:1",
    )  # fmt: skip


def _submit(tid: str, cls: TaskClass, t: float) -> Entry:
    task = TaskSubmitted(task_id=tid, tenant="org-a", gpu_model="A100", gpus_per_worker=2, workers=1,
                         task_class=cls, command=("gfs", "fake-task"))  # fmt: skip
    entry = entry_for(task, T0 + t)
    assert entry is not None
    return entry


def _run(controller: PoolController, entries: list[Entry]) -> list[Any]:
    """Apply `entries` (each followed by a pass, as the shell does), workers starting for every
    bind; everything decided, in order."""
    out: list[Any] = []
    for entry in entries:
        effects = Effects()
        effects.extend(apply(controller, entry))
        effects.extend(apply(controller, ScheduleEntry(at=entry.at)))
        out += [*effects.commands, *effects.events, *effects.decisions]
    return out


def _journal() -> list[Entry]:
    """Nodes, a quota, spot tasks filling the pool, then HP tasks preempting them: the inputs a live
    controller journaled, with the worker acks of its binds."""
    live = PoolController("A100", SETTINGS)
    journal: list[Entry] = []

    def play(entry: Entry) -> None:
        journal.append(entry)
        effects = apply(live, entry)
        journal.append(ScheduleEntry(at=entry.at))
        effects.extend(apply(live, journal[-1]))
        for bind in (c for c in effects.commands if isinstance(c, BindCommand)):
            for p in bind.placements:
                ack = WorkerStarted(command_id=bind.command_id, node=bind.node, task_id=bind.task_id,
                                    worker_index=p.worker_index, pid=100 + p.worker_index,
                                    started_at=datetime.fromtimestamp(entry.at + 1, UTC),
                                    attempt=bind.attempt)  # fmt: skip
                started = entry_for(ack, entry.at + 1)
                assert started is not None
                play(started)

    for n in range(4):
        play(NodeSeenEntry(node=f"n{n}", gpus=2, at=T0))
    quota = entry_for(_quota(), T0)
    assert quota is not None
    play(quota)
    for i in range(6):
        play(_submit(f"spot-{i}", TaskClass.SPOT, 10.0 + i))
    for i in range(4):
        play(_submit(f"hp-{i}", TaskClass.HP, 100.0 + i))
    play(TickEntry(at=T0 + 200.0))
    return journal


def test_a_restored_controller_decides_what_the_live_one_decides() -> None:
    journal = _journal()
    assert len(journal) > 40
    for cut in (5, len(journal) // 2, len(journal) - 3):
        before = PoolController("A100", SETTINGS)
        _run(before, journal[:cut])
        blob, version, modules = snapshots.encode(snapshots.Image({"A100": before}), SETTINGS)
        image = snapshots.decode(blob, version, modules, SETTINGS)
        assert image is not None
        restored = image.controllers["A100"]
        assert restored is not before
        whole = PoolController("A100", SETTINGS)  # a full replay, as a claim without snapshots does
        _run(whole, journal[:cut])
        rest = journal[cut:]
        assert _run(restored, rest) == _run(whole, rest)
        now = T0 + 300.0
        assert restored.status(now) == whole.status(now)
        assert (restored.counter, restored.seen, set(restored.tasks)) == (
            whole.counter,
            whole.seen,
            set(whole.tasks),
        )
        # ... and the next pass, on a state where HP tasks preempted spot ones, too.
        tail: list[Entry] = [_submit("late", TaskClass.HP, 400.0), TickEntry(at=T0 + 500.0)]
        assert _run(restored, tail) == _run(whole, tail)


def test_the_modules_the_state_depends_on_are_recorded() -> None:
    c = PoolController("A100", SETTINGS)
    _run(c, _journal()[:20])
    _, _, modules = snapshots.encode(snapshots.Image({"A100": c}), SETTINGS)
    assert "gfs.services.preemption.controller.pool" in modules  # PoolController itself
    assert "gfs.services.core.runtime" in modules or any(m.startswith("gfs.services.core") for m in modules)
    assert "gfs.schemas.quota" in modules  # the SpotQuota it keeps


def test_a_snapshot_of_other_settings_or_other_code_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    c = PoolController("A100", SETTINGS)
    _run(c, _journal()[:20])
    blob, version, modules = snapshots.encode(snapshots.Image({"A100": c}), SETTINGS)
    assert snapshots.decode(blob, version, modules, SETTINGS) is not None
    other = ControllerSettings(grace_s=60.0, ack_margin_s=10.0)  # decides differently: refused
    assert snapshots.decode(blob, version, modules, other) is None
    # The controller's source changed since the snapshot was written (another release): refused.
    monkeypatch.setitem(snapshots._DIGESTS, "gfs.services.preemption.controller.pool", "another-release")
    assert snapshots.decode(blob, version, modules, SETTINGS) is None


def test_a_snapshot_naming_a_module_that_is_gone_or_bytes_that_do_not_load_is_refused() -> None:
    c = PoolController("A100", SETTINGS)
    blob, version, modules = snapshots.encode(snapshots.Image({"A100": c}), SETTINGS)
    assert (
        snapshots.decode(blob, version, [*modules, "gfs.services.preemption.no_such_module"], SETTINGS)
        is None
    )
    assert snapshots.decode(b"not a pickle", version, modules, SETTINGS) is None
    other = pickle.dumps({"not": "an image"}, protocol=snapshots.PROTOCOL)
    assert snapshots.decode(other, version, modules, SETTINGS) is None


def test_a_snapshot_of_another_format_is_refused_before_its_modules_are_imported() -> None:
    """A format-1 image names the modules by their names before the move under `gfs`; in a
    source checkout that old name would still import, as a second copy of the module."""
    c = PoolController("A100", SETTINGS)
    blob, version, modules = snapshots.encode(snapshots.Image({"A100": c}), SETTINGS)
    old = version.replace(f"f{snapshots.FORMAT}/", "f1/", 1)
    old_names = [m.removeprefix("gfs.") for m in modules]
    assert snapshots.decode(blob, old, old_names, SETTINGS) is None
    assert not [m for m in old_names if m in sys.modules and m.startswith("services.")]


@pytest.mark.parametrize(
    ("rows", "seconds", "rows_since", "seconds_since", "due"),
    [
        (10, 300.0, 0, 1000.0, False),  # nothing journaled since: never
        (10, 300.0, 9, 299.0, False),
        (10, 300.0, 10, 0.0, True),  # the row interval
        (10, 300.0, 1, 300.0, True),  # the time interval, with a row since
        (0, 300.0, 10_000, 10.0, False),  # rows trigger off
        (0, 0.0, 10_000, 10_000.0, False),  # both off: never
    ],
)
def test_when_a_snapshot_is_due(
    rows: int, seconds: float, rows_since: int, seconds_since: float, due: bool
) -> None:
    assert snapshots.Policy(rows, seconds).due(rows_since, seconds_since) is due


@pytest.mark.parametrize(
    "module",
    [
        "gfs.services.preemption.controller.endings",
        "gfs.services.preemption.controller.ledger",
        "gfs.services.preemption.controller.periods",  # functions only: no pickled object's class
    ],
)
def test_a_snapshot_is_refused_when_a_part_the_controller_is_built_of_changed(
    monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    # PoolController's behaviour lives in its collaborators' modules too (the controller package):
    # a release that changed only how a stopped run ends, or the state, must not restore old bytes.
    c = PoolController("A100", SETTINGS)
    _run(c, _journal()[:20])
    blob, version, modules = snapshots.encode(snapshots.Image({"A100": c}), SETTINGS)
    assert module in modules
    monkeypatch.setitem(snapshots._DIGESTS, module, "another-release")
    assert snapshots.decode(blob, version, modules, SETTINGS) is None
