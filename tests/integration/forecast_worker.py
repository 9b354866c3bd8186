"""A forecast worker for the stream's end-to-end tests (test_forecast_stream.py and
test_forecast_task_expiry.py): a real `gfs serve forecast` process of its own app id, and the
ordering barrier the tests feed it through (each event handled, its offsets committed, before the
next is sent), the reads of what it published after given offsets, and its catching up with the
task topics' history; the forecasts of a pool and the dead letters of a worker's group among them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from live_harness import groups_from_the_end
from quota_harness import _free_port

from gfs.schemas.dead_letter import DeadLetter
from gfs.schemas.envelope import Envelope, wrap
from gfs.schemas.forecast import DemandForecast, PoolDemandForecast
from gfs.schemas.tasks import TaskClass, TaskSubmitted
from gfs.schemas.topics import decode
from gfs.services.platform.kafka.producer import EnvelopeProducer

REPO = Path(__file__).resolve().parents[2]


BAD = b"{not json"


SOURCES = ("gfs.tasks.submit", "gfs.tasks.lifecycle")
# Everything a forecast worker reads: a fresh worker's group starts at their ends (`_stream`), so it
# reads only its test's records, not the history of every test before it (nor the floods of the
# tests running beside it: minutes on a loaded machine).
INPUTS = (*SOURCES, "gfs.pools.demand", "gfs.control.clock")


@contextlib.contextmanager
def _worker(
    kafka_bootstrap: str, app_id: str, log_path: Path, web_port: int = 0, **extra_env: str
) -> Iterator[Path]:
    """A forecast worker (its own app id), ready to consume; stopped gracefully on exit."""
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "FORECAST_APP_ID": app_id,
        "FORECAST_DATADIR": str(log_path.parent / f"faust-{log_path.stem}"),
        "FORECAST_STORE": "memory://",  # tables live in their changelogs only: a restart rebuilds them
        "FORECAST_TICK_S": "3600",
        "FORECAST_WEB_PORT": str(web_port),
        # Commit often: the tests' ordering barrier waits for commits (Faust's default is 2.8 s).
        "FORECAST_COMMIT_INTERVAL_S": "0.2",
        # These workers are fed task events: the observed series (issue 10). The servable one, the
        # default, comes from the preemption service (test_forecast_servable.py passes it).
        "FORECAST_DEMAND_SOURCE": "observed",
        **extra_env,
    }
    log = log_path.open("w")
    gfs = str(Path(sys.executable).parent / "gfs")
    worker = subprocess.Popen(
        [gfs, "serve", "forecast"], env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 60
        while "[^Worker]: Ready" not in log_path.read_text():
            assert worker.poll() is None, log_path.read_text()[-2000:]
            assert time.monotonic() < deadline, "the forecast worker did not get ready in 60 s"
            time.sleep(0.2)
        yield log_path
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
        log.close()


@contextlib.contextmanager
def _stream(
    kafka_bootstrap: str, tmp_path: Path, prefix: str, **extra_env: str
) -> Iterator[tuple[str, Path, int]]:
    """A forecast worker of its own (app id `prefix`-<hex>) serving on a free web port: its app id,
    log and port; stopped after the block."""
    app_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
    port = _free_port()
    groups_from_the_end(kafka_bootstrap, {app_id: INPUTS})
    with _worker(kafka_bootstrap, app_id, tmp_path / "worker.log", web_port=port, **extra_env) as log_path:
        yield app_id, log_path, port


def _submit(task_id: str, tenant: str, pool: str, gpus: int) -> TaskSubmitted:
    return TaskSubmitted(task_id=task_id, tenant=tenant, gpu_model=pool, gpus_per_worker=gpus, workers=1,
                         task_class=TaskClass.HP, command="serve")  # fmt: skip


async def _consuming(producer: EnvelopeProducer, log: Path, run: str) -> None:
    """Send a malformed record and wait until the worker dead-letters it: it is then consuming
    (after the rebalance that follows its start), so what comes next is read in order."""
    where = await producer.send_raw("gfs.tasks.submit", value=BAD, key=f"{run}-bad".encode())
    await _wait_for_log(log, f"dead-lettered gfs.tasks.submit[{where.partition}]@{where.offset}:")


async def _send_in_order(
    producer: EnvelopeProducer, steps: list[tuple[Any, datetime]], *, kafka_bootstrap: str, app_id: str
) -> None:
    """Each step is handled before the next is sent: the events come from two topics and several
    partitions, which have no common order, and a worker that is behind (a loaded machine) would
    otherwise read a later task's event first. "Handled" = the app's group committed the source
    topics and its re-keyed demand topic to their ends (the stream commits only what it handled)."""
    barrier = (*SOURCES, f"{app_id}-demand-by-pool")
    for payload, when in steps:
        topic = "gfs.tasks.submit" if isinstance(payload, TaskSubmitted) else "gfs.tasks.lifecycle"
        await producer.send(topic, wrap(payload, producer="it", occurred_at=when))
        await _committed_to_the_end(kafka_bootstrap, app_id, barrier)


async def _wait_for_log(path: Path, text: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in path.read_text():
        assert time.monotonic() < deadline, f"the worker never logged {text!r}"
        await asyncio.sleep(0.2)


async def _committed_to_the_end(
    kafka_bootstrap: str, group: str, topics: tuple[str, ...], timeout_s: float = 60.0
) -> None:
    """Wait until `group` committed every partition of `topics` up to its end as of the call
    (what a driver's lag barrier waits for); fails after `timeout_s`."""
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    reader = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    await reader.start()
    t0 = time.monotonic()
    behind: dict[TopicPartition, int] = {}
    try:
        # (aiokafka's consumer.topics() does not fill partitions_for_topic: ask the admin client.)
        described = await admin.describe_topics(list(topics))
        parts = [TopicPartition(d["topic"], p["partition"]) for d in described for p in d["partitions"]]
        assert len({tp.topic for tp in parts}) == len(topics), f"partitions missing for {topics}: {parts}"
        ends = await reader.end_offsets(parts)
        while time.monotonic() - t0 < timeout_s:
            committed = await admin.list_consumer_group_offsets(group) or {}
            behind = {
                tp: end - max(0, committed[tp].offset if tp in committed else 0)
                for tp, end in ends.items()
                if end > (committed[tp].offset if tp in committed else 0)
            }
            if not behind:
                return
            await asyncio.sleep(0.05)
    finally:
        await reader.stop()
        await admin.close()
    raise AssertionError(f"{group} did not commit to the end of {topics} in {timeout_s} s: {behind}")


Read = list[tuple[Envelope[Any], tuple[tuple[str, bytes], ...]]]  # (envelope, headers), in order


async def _read_after(
    kafka_bootstrap: str, topic_name: str, offsets: dict[TopicPartition, int], done: Callable[[Read], bool]
) -> Read:
    """What `topic_name` got after `offsets` (no consumer group: nothing older is read, nothing
    is dead-lettered; records that do not decode are skipped) until `done` says enough."""
    reader = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False)
    await reader.start()
    got: Read = []
    try:
        reader.assign(list(offsets))
        for tp, offset in offsets.items():
            reader.seek(tp, offset)
        deadline = time.monotonic() + 60.0
        while not done(got):
            assert time.monotonic() < deadline, f"{topic_name} never had what the test waits for: {got}"
            for records in (await reader.getmany(timeout_ms=500)).values():
                for record in records:
                    with contextlib.suppress(ValueError):
                        got.append((decode(topic_name, record.value or b""), tuple(record.headers or ())))
    finally:
        await reader.stop()
    return got


async def _forecasts_of(
    kafka_bootstrap: str, offsets: dict[TopicPartition, int], pool: str, origin: datetime, count: int
) -> tuple[Read, list[tuple[Any, tuple[tuple[str, bytes], ...]]]]:
    """What gfs.forecasts got after `offsets` until `count` forecasts of `pool` from `origin` (the
    pool's and its tenants'); and those forecasts, with their headers."""

    def ours(env: Envelope[Any]) -> bool:
        p = env.payload
        return (
            isinstance(p, DemandForecast | PoolDemandForecast) and p.pool == pool and p.origin_time == origin
        )

    received = await _read_after(
        kafka_bootstrap, "gfs.forecasts", offsets, done=lambda got: sum(ours(env) for env, _ in got) >= count
    )
    return received, [(env.payload, headers) for env, headers in received if ours(env)]


async def _letter_of(
    kafka_bootstrap: str, offsets: dict[TopicPartition, int], app_id: str, match: Callable[[DeadLetter], bool]
) -> DeadLetter:
    """The first dead letter of `app_id`'s group after `offsets` that `match` picks."""

    def ours(env: Envelope[Any]) -> bool:
        p = env.payload
        return isinstance(p, DeadLetter) and p.consumer_group == app_id and match(p)

    letters = await _read_after(
        kafka_bootstrap, "gfs.deadletter", offsets, done=lambda got: any(ours(env) for env, _ in got)
    )
    found: DeadLetter = next(env.payload for env, _ in letters if ours(env))
    return found


async def _caught_up(kafka_bootstrap: str, app_id: str) -> None:
    """The worker read the task topics up to where they ended now. A new app id reads them from
    the start (older tests left ~10^5 records): until it caught up, a partition behind the
    others would deliver this test's events late and out of order."""
    await _committed_to_the_end(kafka_bootstrap, app_id, SOURCES, timeout_s=300.0)
