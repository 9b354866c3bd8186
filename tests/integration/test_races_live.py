"""Issue 22's race run, small (`gfs livebench races --tasks 300`): the real preemption service,
four real node agents whose acks are delayed at random, short tasks that end on their own while
HP evictions are on their way. From the topics and the agents' journals: no GPU bound twice, no
false eviction, every task finished; and the races really happened (exits that raced an
eviction, acks that arrived late), so the zeros mean something."""

from __future__ import annotations

from pathlib import Path

import pytest

from gfs.services.livebench.races.bench import RacePlan, run_races
from gfs.services.livebench.races.render import render

pytestmark = pytest.mark.integration


async def test_exits_racing_evictions_bind_no_gpu_twice_and_evict_nothing_falsely(
    kafka_bootstrap: str, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("DATABASE_URL", database_url)
    # Shorter tasks, more HP and later acks than the 10,000-task defaults: in 300 tasks, enough
    # evictions meet a worker that has just ended on its own.
    plan = RacePlan(
        tasks=300, hp_share=0.5, min_s=0.1, max_s=1.0, ack_delay_max_s=0.5, settle_s=120.0, seed=22
    )
    report, numbers = await run_races(plan, tmp_path / "races", echo=lambda _: None)
    summary = "\n".join(render(report, numbers))
    print(summary)
    # The races happened: evictions met workers that had just ended on their own, acks were late.
    assert report.evictions >= 10, summary
    assert report.evictions_raced_by_exit >= 1 and report.not_running_acks >= 1, summary
    assert max(report.ack_delays_ms) > 100.0, summary
    assert report.workers_run >= plan.tasks, summary
    # And nothing went wrong, from the agents' journals and the topics.
    assert report.double_bound_on_node == [], summary
    assert report.double_bound_in_commands == [], summary
    assert report.false_evictions == [], summary
    assert report.evicted_twice == [] and report.finished_twice == [], summary
    assert report.false_failed_periods == [], summary
    assert report.unverified_evictions == [], summary
    assert numbers["never_answered"] == [] and report.unfinished == [], summary
    assert report.accepted == plan.tasks and report.finished == plan.tasks, summary
