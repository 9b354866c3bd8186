"""`gfs serve quota-adapter --dry-run` on the real broker: SpotQuota on gfs.quotas in, printed
ClusterQueue / Queue patch out, following changes and falling back to 0 when a quota expires.

gfs.quotas is shared and compacted: each run uses its own pool and queue names and reads only
the lines that name them. The adapter joins no consumer group (the compacted topic is its state).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gfs.schemas.envelope import wrap
from gfs.schemas.quota import GuaranteeQuota, SpotQuota
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def _quota(pool: str, gpus_1h: float, *, valid_from: datetime, valid_for: timedelta) -> SpotQuota:
    return SpotQuota(
        pool=pool, quotas=(GuaranteeQuota(guarantee_hours=1, quota_gpus=gpus_1h),), eta=1.0, capacity_gpus=32,
        valid_from=valid_from, valid_until=valid_from + valid_for, forecast_version="it@adapter",
    )  # fmt: skip


def _limit(target: str, manifest: dict[str, Any]) -> int:
    if target == "kueue":
        return int(manifest["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"])
    return int(manifest["spec"]["resources"]["gpu"]["limit"])


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.parametrize("target", ["kueue", "kai"])
async def test_dry_run_prints_the_patch_for_each_quota_change(
    target: str, kafka_bootstrap: str, registry_topics: TopicsReport, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    pool, queue = f"IT-ADAPTER-{tag}", f"spot-{tag}"
    mapping = (
        {"kueue": {"cluster_queues": [{"name": queue, "flavors": [{"flavor": f"gpu-{tag}", "pool": pool}]}]}}
        if target == "kueue"
        else {"kai": {"queues": [{"name": queue, "pool": pool}]}}
    )
    config = tmp_path / "adapter.json"  # JSON is YAML
    config.write_text(json.dumps(mapping))
    now = datetime.now(UTC)

    async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
        # Published before the adapter starts: it must find it by reading the compacted topic.
        await producer.send(
            "gfs.quotas",
            wrap(_quota(pool, 12.7, valid_from=now, valid_for=timedelta(minutes=10)), producer="it"),
        )
        env = {**os.environ, "PYTHONPATH": str(REPO), "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}
        # The log goes to a file: the shared topic holds other tests' bad records, and an undrained
        # stderr pipe would fill with their warnings and block the adapter.
        log_path = tmp_path / "adapter.log"
        log_file = log_path.open("wb")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gfs.services", "serve", "quota-adapter", "--target", target,
            "--config", str(config), "--dry-run", "--recheck-s", "1",
            cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=log_file,
        )  # fmt: skip
        assert proc.stdout is not None
        seen: list[int] = []

        async def next_limit() -> int:
            while True:
                line = await asyncio.wait_for(proc.stdout.readline(), timeout=90)  # type: ignore[union-attr]
                assert line, "the adapter exited: " + log_path.read_text()[-2000:]
                manifest = json.loads(line)
                if manifest["metadata"]["name"] == queue:
                    seen.append(_limit(target, manifest))
                    return seen[-1]

        try:
            assert await next_limit() == 12  # 12.7 GPUs promised for 1 h -> 12 whole GPUs
            # Each quota is newer than the one before (a later valid_from; the adapter ignores an
            # older one). Real time has moved on since `now`: the adapter started in between.
            later = datetime.now(UTC)
            assert later > now
            await producer.send(
                "gfs.quotas",
                wrap(_quota(pool, 3.2, valid_from=later, valid_for=timedelta(minutes=10)), producer="it"),
            )
            assert await next_limit() == 3
            # A quota that expires 4 s from now, with no successor: 20, then back to 0 (safe side).
            latest = datetime.now(UTC)
            await producer.send(
                "gfs.quotas",
                wrap(_quota(pool, 20.0, valid_from=latest, valid_for=timedelta(seconds=4)), producer="it"),
            )
            assert await next_limit() == 20
            assert await next_limit() == 0
            assert seen == [12, 3, 20, 0]  # one line per change, none repeated
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGINT)
            rc = await asyncio.wait_for(proc.wait(), timeout=30)
            log_file.close()
        assert rc == 0
