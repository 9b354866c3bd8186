"""The soak run (issue 25 item 6), CI-sized, on the shared stack: its own services killed and
restarted, the broker and Postgres never touched, so it runs beside the other tests (not
`disruptive`); the fault runs that stop the broker and Postgres are test_faults.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from gfs.services.faults.harness import run_faults
from gfs.services.faults.plan import FaultPlan
from gfs.services.platform.kafka.topic_admin import TopicsReport

pytestmark = pytest.mark.integration


@pytest.mark.asyncio(loop_scope="session")
async def test_a_short_soak_samples_memory_lag_rows_and_failover(
    registry_topics: TopicsReport, database_url: str, tmp_path: Path
) -> None:
    """120 s of load, the preemption service killed at 30 s and 60 s, a sample every 10 s, 60-s
    intervals (a kill in each). The harness's checks still hold, and every
    interval carries what the soak reports: each service's memory, each group's lag, the journal's
    rows (growing), the failovers."""
    plan = FaultPlan(
        soak_s=120.0,
        kill_every_s=30.0,
        sample_s=10.0,
        report_every_s=60.0,
        settle_s=20.0,
        seed=7,
        outage_s=0.0,  # the shared stack stays up: other tests run beside this one
    )
    report = await run_faults(plan, workdir=tmp_path)
    summary = report.as_dict()
    print(summary)
    assert report.ok, summary
    assert report.kills["preemption"] == 2 and report.outages == [], summary
    assert report.accepted > 20 and report.finished > 0, summary
    intervals = report.soak
    assert [row["interval"] for row in intervals] == [0, 1], summary
    for row in intervals:
        assert {"forecast", "quota"} <= set(row["rss_mb"]), row
        assert all(v["median"] > 10.0 for v in row["rss_mb"].values()), row
        assert len(row["lag_max"]) == 3, row
        assert row["rows"]["preemption_journal"] > 0, row
    assert intervals[1]["rows"]["preemption_journal"] >= intervals[0]["rows"]["preemption_journal"]
    assert [len(row["failover_s"]) for row in intervals] == [1, 1], summary
    assert all(0.0 < s < 60.0 for row in intervals for s in row["failover_s"]), summary
