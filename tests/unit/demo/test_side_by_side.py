"""The demo's side-by-side table: the live row measured from decision records, by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gfs.services.demo.side_by_side import SIM_POLICIES, Row, live, simulated, verdict
from gfs.services.platform.settings import REPO_ROOT
from gfs.services.simulator.traces.records import Trace, TraceJob, TraceNode

T0 = datetime(2026, 12, 4, 12, tzinfo=UTC)


def _job(name: str, cls: str, gpus: float, duration_s: float) -> TraceJob:
    return TraceJob(
        name=name, organization="o", gpu_model="P", cpu_request=1.0, gpus_per_worker=gpus, workers=1,
        submit_s=0.0, duration_s=duration_s, job_class=cls,  # type: ignore[arg-type]
    )  # fmt: skip


def _at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def test_the_live_row_follows_the_simulators_definitions() -> None:
    trace = Trace(
        nodes=(TraceNode("n", "P", 8, 64),),
        jobs=(_job("s", "SPOT", 2.0, 3600.0), _job("h", "HP", 1.0, 60.0), _job("h2", "HP", 4.0, 60.0)),
        horizon_s=4000.0,
    )
    d = [
        ("r-s", "accepted", 0, {}), ("r-s", "started", 10, {}),
        ("r-s", "evicted", 20, {"reason": "PREEMPTED_BY_HP"}), ("r-h", "accepted", 15, {}),
        ("r-h", "started", 20, {}),  # the preemptor starts at the instant of the eviction
        ("r-s", "started", 50, {}), ("r-s", "finished", 100, {}),
        ("r-h2", "accepted", 90, {}),  # still queued when the run stops at 120
        ("r-x", "started", 5, {}),  # not a task of the sample: ignored
        ("", "quota", 30, {}),
    ]  # fmt: skip
    rows = [{"task_id": t, "kind": k, "at": _at(s), "detail": det} for t, k, s, det in d]
    row = live(rows, trace, prefix="r-", speed=2.0, stopped_at=_at(120))
    # Spot s waited 10 s before its first start and 30 s after its eviction: 40 wall s = 80 sample s.
    assert row.spot_queue_mean_s == 80.0
    # HP h waited 5 s, h2 30 s (censored at the stop): (10 + 60) / 2 sample seconds.
    assert row.hp_queue_mean_s == 35.0
    assert row.spot_evictions == 1
    assert row.spot_gpu_hours_completed == 2.0  # 2 GPUs x the 1 h of work the sample gives s
    assert (row.finished, row.tasks) == (1, 3)


def test_an_eviction_that_is_not_a_preemption_is_not_counted() -> None:
    trace = Trace(nodes=(TraceNode("n", "P", 8, 64),), jobs=(_job("s", "SPOT", 1.0, 60.0),), horizon_s=100.0)
    rows = [
        {"task_id": "s", "kind": "accepted", "at": _at(0), "detail": {}},
        {"task_id": "s", "kind": "started", "at": _at(1), "detail": {}},
        {"task_id": "s", "kind": "evicted", "at": _at(2), "detail": {"reason": "NODE_LOST"}},
    ]
    row = live(rows, trace, prefix="", speed=1.0, stopped_at=_at(10))
    assert row.spot_evictions == 0 and row.spot_queue_mean_s == 1.0 + 8.0


@pytest.mark.slow
def test_the_simulated_rows_cover_every_sample_task() -> None:
    rows = simulated(Path(REPO_ROOT / "demo" / "sample"))
    assert [r.name for r in rows] == [f"simulated {p}" for p in SIM_POLICIES]
    assert all(r.tasks == 464 and r.finished == 464 for r in rows), rows  # demo/sample/README.md


def _row(name: str, evictions: int, spot_q: float, hp_q: float, idle: dict[str, float] | None = None) -> Row:
    return Row(name, evictions, spot_q, hp_q, 10.0, 5, 5, idle or {})


def test_the_verdict_says_gfs_keeps_its_promise_only_when_all_three_hold() -> None:
    fifo = _row("simulated fifo", 3, 1200.0, 600.0, {"order": 2.0})
    kept = verdict([_row("simulated gfs", 1, 600.0, 600.0), fifo])
    assert "keeps its promise" in kept and "does not keep" not in kept
    assert "1 spot evictions against 3" in kept and "10.0 min against 20.0 min" in kept
    assert "Why spot waited longer" not in kept and "PREEMPTED_BY_HP" not in kept
    # HP one second worse breaks the promise, whatever spot gained.
    assert "does not keep" in verdict([_row("simulated gfs", 1, 600.0, 601.0), fifo])


def test_the_verdict_names_why_spot_waited_from_the_idle_gpu_hours() -> None:
    fifo = _row("simulated fifo", 0, 600.0, 600.0, {"order": 2.0})
    gfs = _row("simulated gfs", 2, 4800.0, 500.0,
               {"quota:forecast": 19.25, "reservation": 9.5, "order": 1.0})  # fmt: skip
    text = verdict([gfs, fifo])
    assert "does not keep" in text and "2 spot evictions against 0" in text
    assert "80.0 min against 10.0 min" in text  # 4800 s and 600 s
    # The two largest reasons, largest first, with their hours; the total against FIFO's.
    assert "left 29.8 GPU-hours idle" in text and "(FIFO 2.0)" in text
    assert text.index("19.2 GPU-h because the spot quota") < text.index(
        "9.5 GPU-h because they were reserved"
    )
    assert "1.0 GPU-h" not in text
    assert "PREEMPTED_BY_HP" in text  # more evictions than FIFO: said what they were


def test_no_verdict_without_both_simulated_rows_nor_a_why_when_gfs_idled_less() -> None:
    assert verdict([_row("simulated gfs", 0, 1.0, 1.0)]) == ""
    text = verdict([_row("simulated gfs", 0, 900.0, 0.0, {"order": 1.0}),
                    _row("simulated fifo", 0, 600.0, 0.0, {"order": 3.0})])  # fmt: skip
    assert "does not keep" in text and "Why spot waited longer" not in text
