"""Sim/live parity: the checked-in parity trace (tests/data/parity: gangs, fractional GPUs, spot
with checkpoints, cancellations) through the live pipeline on the controllable clock — forecast
(persistence), quota, preemption and one real node agent per trace node running fake tasks on
the same clock, all real processes on the real broker and Postgres — gives the identical ordered
decision log (task, node, GPU indices, victims, cancellations) as `gfs simulate --decisions` on
the same trace with the window covering it all. The same run as `gfs parity run`."""

from __future__ import annotations

from pathlib import Path

import pytest

from gfs.services.parity.driver import ParityOptions, run_parity
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.platform.settings import REPO_ROOT

pytestmark = pytest.mark.integration


@pytest.mark.asyncio(loop_scope="session")
async def test_the_live_pipeline_makes_the_simulators_decisions(
    registry_topics: TopicsReport, database_url: str, tmp_path: Path
) -> None:
    options = ParityOptions(
        trace_dir=REPO_ROOT / "tests" / "data" / "parity", workdir=tmp_path, progress=print
    )
    report = await run_parity(options)
    print(report.describe())
    assert report.diff.identical, report.describe()
    # Not vacuous: the trace exercises what the promise is about.
    actions = report.diff.actions
    assert (
        actions.get("evict", 0) >= 10 and actions.get("cancel", 0) >= 2 and actions.get("start", 0) >= 30
    ), actions
