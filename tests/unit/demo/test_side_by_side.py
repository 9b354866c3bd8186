"""The demo's side-by-side table: the live row measured from decision records, by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from services.demo.side_by_side import SIM_POLICIES, live, simulated
from services.platform.settings import REPO_ROOT
from services.simulator.traces.records import Trace, TraceJob, TraceNode

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
