"""`gfs bench pipeline` for 30 seconds on the full-scale inventory: a smoke that fails on errors
(nothing decided, nothing read back), never on time. The measured run is a documented command."""

from __future__ import annotations

import pytest

from services.livebench.preemption_bench import _bench, _inventory
from services.platform.kafka.topic_admin import TopicsReport
from services.platform.settings import PlatformSettings

pytestmark = [pytest.mark.integration, pytest.mark.disruptive]


@pytest.mark.asyncio(loop_scope="session")
async def test_the_pipeline_benchmark_runs_for_30_seconds_without_errors(
    registry_topics: TopicsReport,
) -> None:
    settings = PlatformSettings()
    inventory = _inventory(settings.gfs_shared_dir / "data" / "gfs-v2026" / "node_info_df.csv")
    summary = await _bench(settings, inventory, rate=50.0, seconds=30.0, fill=0.8, hp_share=0.5, seed=7,
                           keep_schema=False)  # fmt: skip
    assert summary["submissions"] > 0 and summary["binds"] > 0 and summary["decisions"] > 0, summary
    assert summary["on_arrival"] > 0, summary
