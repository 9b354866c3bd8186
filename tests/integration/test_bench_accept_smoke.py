"""`gfs livebench accept` for a few seconds at a low rate: every submitted task is read back with
its TaskAccepted and the numbers are printed. A smoke that fails on errors, never on time (the
measured run is a documented command, docs/benchmarks.md)."""

from __future__ import annotations

import pytest

from gfs.services.livebench.accept.bench import run_accept_bench
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.platform.settings import PlatformSettings

pytestmark = [pytest.mark.integration]


@pytest.mark.asyncio(loop_scope="session")
async def test_the_accept_benchmark_reads_back_a_task_accepted_for_every_submission(
    registry_topics: TopicsReport,
) -> None:
    lines: list[str] = []
    summary = await run_accept_bench(
        PlatformSettings(), rate=20.0, seconds=3.0, nodes=2, gpus=8, run_s=0.5, echo=lines.append
    )
    # 20/s for 3 s: 60 submissions, every one read back from the topic and accepted (the shapes
    # all fit a node of 8 GPUs, so none is rejected).
    assert summary["submitted"] == 60, summary
    assert summary["read_back"] == 60 and summary["accepted"] == 60 and summary["rejected"] == 0, summary
    assert summary["accept_ms"]["n"] == 60, summary
    printed = "\n".join(lines)
    assert "submit -> TaskAccepted: n=60 p50" in printed and " p99 " in printed, printed
    assert "submit -> first BindCommand" in printed and "load average" in printed, printed
