"""`gfs bench pipeline` for 10 seconds on the full-scale inventory: a smoke that fails on errors
(nothing decided, nothing read back), never on time. The measured run is a documented command."""

from __future__ import annotations

import pytest

from gfs.services.livebench.pipeline.ramp import RampOptions
from gfs.services.livebench.preemption_bench import _bench, _inventory
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.platform.settings import PlatformSettings

pytestmark = [pytest.mark.integration, pytest.mark.disruptive]


@pytest.mark.asyncio(loop_scope="session")
async def test_the_pipeline_benchmark_runs_for_10_seconds_without_errors(
    registry_topics: TopicsReport,
) -> None:
    settings = PlatformSettings()
    inventory = _inventory(settings.gfs_shared_dir / "data" / "gfs-v2026" / "node_info_df.csv")
    summary = await _bench(settings, inventory, rate=50.0, seconds=10.0, fill=0.8, hp_share=0.5, seed=7,
                           keep_schema=False)  # fmt: skip
    assert summary["submissions"] > 0 and summary["binds"] > 0 and summary["decisions"] > 0, summary
    assert summary["on_arrival"] > 0, summary
    # The latency budget (issue 37): every on-arrival bind carries the stamps of each stage, in the
    # order of the steps, and its stages add up to the latency the bench measured itself.
    assert summary["staged"] > 0, summary
    assert summary["staged_in_order"] == summary["staged"], summary
    assert summary["staged_within_5pct"] == summary["staged"], summary
    assert summary["accept_p99_ms"] > 0, summary  # submit -> TaskAccepted read back and reported


@pytest.mark.asyncio(loop_scope="session")
async def test_the_ramp_runs_its_steps_with_the_backlog_kept_queued(registry_topics: TopicsReport) -> None:
    """`--ramp --backlog --instances 2`: two 5-s steps over 300 queued spot tasks, through two
    instances sharing the pools. The backlog asks for a guarantee the bench gives no quota, so every
    one of its tasks must still be waiting at the end (were it placed, the backlog would not be a
    backlog). Whether a 5-s step places anything on arrival depends on the queue it meets; the plain
    smoke above checks that."""
    settings = PlatformSettings()
    inventory = _inventory(settings.gfs_shared_dir / "data" / "gfs-v2026" / "node_info_df.csv")
    ramp = RampOptions(start=20.0, factor=2.0, step_s=5.0, p99_limit_ms=1e9, max_steps=2)
    summary = await _bench(settings, inventory, rate=0.0, seconds=0.0, fill=0.8, hp_share=0.5, seed=11,
                           keep_schema=False, backlog=300, ramp=ramp, instances=2)  # fmt: skip
    assert summary["steps"] >= 1, summary
    assert summary["backlog_waiting"] == 300, summary
