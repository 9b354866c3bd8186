"""The live services' metrics in the real Prometheus of the stack (`make up`).

`gfs serve quota` on 127.0.0.1:8081 and `gfs serve preemption` on 127.0.0.1:8082, as subprocesses
on the ports infra/prometheus/prometheus.yml scrapes (every 5 s). The test feeds a unique pool: a
PoolStatus and a PoolDemandForecast (the quota service computes the pool's SpotQuota and publishes
it; the preemption service applies it), a node's telemetry and a few submissions (decisions). Then
Prometheus' HTTP API (`/api/v1/query`) has:

- the decision-latency histogram `gfs_preemption_decision_latency_seconds_bucket` (buckets up to
  `+Inf`, a count, a median by `histogram_quantile`) and the decisions by kind;
- the quota per pool from both sides, `gfs_quota_gpus{pool=...}` (job gfs-quota) and
  `gfs_preemption_quota_gpus{pool=...}` (job gfs-preemption), equal per guarantee duration;
- a series for every query of the Grafana dashboard (infra/grafana/gfs-dashboard.json, `$pool` =
  this run's pool) that reads only metrics this run produces (NOT_PRODUCED says which it does not,
  and why), and the pool's quota in force, not stale;
- and the services' own `/metrics` pass `promtool check metrics` with no warning.

Fails (not skips) with instructions when Prometheus does not answer or a port is taken.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from grafana_queries import queries as dashboard_queries
from live_harness import ServiceProcess, Tap
from quota_harness import _forecast, _migrated
from test_observability_stack import PROMETHEUS_URL, _require

from gfs.schemas.envelope import wrap
from gfs.schemas.pool_status import PoolStatus
from gfs.schemas.tasks import TaskAccepted, TaskClass, TaskSubmitted
from gfs.schemas.telemetry import GpuSample, NodeTelemetry
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.platform.signing import node_key, sign

pytestmark = pytest.mark.integration

QUOTA_PORT, PREEMPTION_PORT = 8081, 8082  # what prometheus.yml scrapes (jobs gfs-quota, gfs-preemption)
# Scrapes every 5 s; the quota service first reads its topics' history (a fresh consumer group).
FIND_DEADLINE_S = 90.0
# What this run does not produce, so dashboard queries reading them may be empty: no forecast worker
# and no node agent run; no task is evicted and no guarantee period ends (no eviction rate); the
# coverage needs status samples after the forecast.
NOT_PRODUCED = {
    "gfs_forecast_coverage_ratio", "gfs_quota_eviction_rate_ratio", "gfs_preemption_evictions_total",
    "gfs_forecast_fallbacks_total", "gfs_forecast_dead_lettered_total", "gfs_forecast_forecasts_total",
    "gfs_forecast_skipped_total", "gfs_agent_sigterm_latency_seconds_bucket",
    "gfs_agent_sigterm_since_issued_seconds_bucket",
}  # fmt: skip


def _require_free(port: int, what: str) -> None:
    with socket.socket() as probe:
        # As the services' aiohttp sites do: a connection of an earlier scrape in TIME_WAIT is no listener.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            pytest.fail(
                f"127.0.0.1:{port} is taken ({exc}): this test runs {what} there, "
                "the port Prometheus scrapes "
                f"(infra/prometheus/prometheus.yml). Stop whatever listens (`ss -ltnp 'sport = :{port}'`; "
                "a `gfs serve ...` of the demo or of another run), then re-run.",
                pytrace=False,
            )


async def _query(http: aiohttp.ClientSession, promql: str) -> list[dict[str, Any]]:
    async with http.get(f"{PROMETHEUS_URL}/api/v1/query", params={"query": promql}) as response:
        body = await response.json()
    assert body.get("status") == "success", (promql, body)
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


class Services:
    def __init__(self, dsn: str, kafka: str, tmp: Path) -> None:
        self.run = uuid.uuid4().hex[:8]
        self.pool = f"PROM-{self.run}"
        self.procs: list[ServiceProcess] = []
        self.base = {
            "DATABASE_URL": dsn, "KAFKA_BOOTSTRAP_SERVERS": kafka, "PYTHONUNBUFFERED": "1",
            "GFS_COMMAND_SECRET": "it-prom-" + uuid.uuid4().hex,
        }  # fmt: skip
        self.tmp = tmp

    def start(self, args: list[str], env: dict[str, str], name: str) -> ServiceProcess:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        proc = ServiceProcess(args, clean | self.base | env, self.tmp / f"{name}.log").start()
        self.procs.append(proc)
        return proc

    def logs(self) -> str:
        return "\n".join(f"--- {p.log.name}\n{p.tail(30)}" for p in self.procs)


@pytest_asyncio.fixture(loop_scope="session")
async def services(
    database_url: str,
    kafka_bootstrap: str,
    registry_topics: TopicsReport,
    scratch_schema: str,
    tmp_path: Path,
) -> AsyncIterator[Services]:
    await _require("Prometheus", PROMETHEUS_URL, "/-/ready", "prometheus")
    _require_free(QUOTA_PORT, "`gfs serve quota`")
    _require_free(PREEMPTION_PORT, "`gfs serve preemption`")
    dsn = await _migrated(database_url, scratch_schema)
    world = Services(dsn, kafka_bootstrap, tmp_path)
    try:
        yield world
    finally:
        for proc in world.procs:
            proc.stop()


@pytest.mark.asyncio(loop_scope="session")
async def test_prometheus_has_the_decision_latency_histogram_and_the_quota_per_pool(
    services: Services, kafka_bootstrap: str
) -> None:
    pool, run = services.pool, services.run
    services.start(
        ["serve", "quota"],
        {"QUOTA_API_PORT": str(QUOTA_PORT), "QUOTA_GROUP": f"it-prom-quota-{run}", "QUOTA_REFRESH_S": "2",
         "QUOTA_FENCE_KEY": str(random.getrandbits(48)), "QUOTA_FENCE_POLL_S": "0.2"},
        "quota",
    )  # fmt: skip
    services.start(
        ["serve", "preemption"],
        {
            "PREEMPTION_API_PORT": str(PREEMPTION_PORT),
            "PREEMPTION_POOLS": pool,
            "PREEMPTION_INSTANCE": f"prom-{run}",
            "PREEMPTION_GROUP": f"it-prom-pre-{run}",
            "PREEMPTION_ROUTER_GROUP": f"it-prom-router-{run}",
            "PREEMPTION_INBOX_TOPIC": f"it-prom-inbox-{run}",
            "PREEMPTION_INBOX_PARTITIONS": "1",
            "PREEMPTION_TICK_S": "0.2",
            "PREEMPTION_NODE_TIMEOUT_S": "600",
        },
        "preemption",
    )
    now = datetime.now(UTC)
    tap = await Tap(kafka_bootstrap, ("gfs.tasks.lifecycle",)).start()
    try:
        async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap, client_id="it-prom") as producer:
            # The quota service's inputs: 8 GPUs, all idle, a small HP forecast: a positive quota.
            status = PoolStatus(
                pool=pool,
                observed_at=now,
                capacity_gpus=8,
                idle_gpus=8,
                spot_in_use_gpus=0.0,
                hp_running_gpus=0.0,
                hp_queued_gpus=0.0,
            )
            forecast = _forecast(pool, now, (7.0,) * 4, tenants=1)
            await producer.send("gfs.pools.status", wrap(status, producer="it"))
            await producer.send("gfs.forecasts", wrap(forecast, producer="it"))
            # The preemption service's: one 8-GPU node, then tasks once the quota is in force.
            samples = tuple(
                GpuSample(index=i, utilisation_pct=0, memory_used_mib=0, memory_total_mib=80_000)
                for i in range(8)
            )
            node = NodeTelemetry(node=f"{pool.lower()}-n0", gpu_model=pool, sampled_at=now, gpus=samples)
            # Signed with the node's key, as the agent signs it (the service refuses it unsigned).
            key = node_key(services.base["GFS_COMMAND_SECRET"].encode(), node.node)
            await producer.send("gfs.nodes.telemetry", wrap(sign(node, key=key), producer="it"))
            await _pool_has_quota(pool)
            tasks = [(f"{pool}-s{i}", TaskClass.SPOT) for i in range(2)] + [(f"{pool}-h0", TaskClass.HP)]
            for tid, cls in tasks:
                task = TaskSubmitted(
                    task_id=tid,
                    tenant="org-it",
                    gpu_model=pool,
                    gpus_per_worker=1,
                    workers=1,
                    task_class=cls,
                    command=("true",),
                )
                await producer.send("gfs.tasks.submit", wrap(task, producer="it"))
            ids = {t for t, _ in tasks}
            await tap.wait(TaskAccepted, lambda e: e.task_id in ids, count=len(ids), timeout=30)

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
            found = await _scraped(http, pool)
            dashboard = await _dashboard_series(http, pool)
            # The live services' own expositions pass promtool too (their wiring, not only the
            # unit-level rendering of tests/static/test_metrics_exposition.py).
            expositions = {}
            for port in (QUOTA_PORT, PREEMPTION_PORT):
                async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
                    expositions[port] = await response.read()
    except BaseException:
        print(services.logs())
        raise
    finally:
        await tap.stop()

    buckets, quota, preemption_quota, decisions, median = found
    les = {b["metric"]["le"] for b in buckets}
    # Buckets in seconds (services/platform/metrics.py SECONDS_BUCKETS), not the SDK's millisecond defaults.
    assert {"+Inf", "0.001", "0.01", "0.1", "1.0"} <= les, les
    inf = next(float(b["value"][1]) for b in buckets if b["metric"]["le"] == "+Inf")
    assert inf >= 2, buckets  # the node's arrival, the quota, the submissions: inbox batches decided
    assert all(b["metric"]["job"] == "gfs-preemption" for b in buckets)
    assert math.isfinite(median) and 0 < median < 5.0, median  # a decided batch takes milliseconds
    assert decisions.get("accepted", 0) >= 3, decisions
    by_hours = {q["metric"]["guarantee_hours"]: float(q["value"][1]) for q in quota}
    assert set(by_hours) == {"1", "2", "4"} and all(q["metric"]["job"] == "gfs-quota" for q in quota), quota
    assert by_hours["1"] > 0, by_hours
    # The quota the preemption service applies is the one published (it also interpolates
    # durations the wire does not offer, e.g. 3 h).
    applied = {q["metric"]["guarantee_hours"]: float(q["value"][1]) for q in preemption_quota}
    assert {h: applied.get(h) for h in by_hours} == by_hours, (applied, by_hours)
    for port, text in expositions.items():
        done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, check=False)
        assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), (port, done)
    # The quota is in force at the preemption service: not stale.
    [stale] = dashboard["Quota stale (1: no SpotQuota in force)"]
    assert stale["metric"]["pool"] == pool and float(stale["value"][1]) == 0, stale
    print(
        f"\nPrometheus: pool {pool} quota {by_hours}, {inf:.0f} decided batches, "
        f"median latency {median * 1000:.1f} ms; {len(dashboard)} dashboard panels returned series"
    )


async def _pool_has_quota(pool: str) -> None:
    """The preemption service applied the quota the quota service computed for `pool`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FIND_DEADLINE_S
    body: Any = None
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        while loop.time() < deadline:
            try:
                async with http.get(f"http://127.0.0.1:{PREEMPTION_PORT}/pools") as response:
                    body = await response.json()
                if (
                    pool in body["pools"]
                    and body["pools"][pool]["quota_version"]
                    and body["pools"][pool]["nodes"]
                ):
                    return
            except (aiohttp.ClientError, TimeoutError, OSError, KeyError):
                pass
            await asyncio.sleep(0.5)
    raise AssertionError(
        f"no quota for {pool} at the preemption service after {FIND_DEADLINE_S:.0f}s: {body}"
    )


async def _scraped(http: aiohttp.ClientSession, pool: str) -> tuple[Any, Any, Any, dict[str, float], float]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FIND_DEADLINE_S
    queries = {
        "buckets": 'gfs_preemption_decision_latency_seconds_bucket{job="gfs-preemption"}',
        "quota": f'gfs_quota_gpus{{pool="{pool}"}}',
        "preemption_quota": f'gfs_preemption_quota_gpus{{pool="{pool}"}}',
        "decisions": 'gfs_preemption_decisions_total{job="gfs-preemption"}',
        "median": (
            "histogram_quantile(0.5, sum by (le) "
            '(gfs_preemption_decision_latency_seconds_bucket{job="gfs-preemption"}))'
        ),
    }
    got: dict[str, list[dict[str, Any]]] = {}
    while loop.time() < deadline:
        got = {name: await _query(http, q) for name, q in queries.items()}
        decisions = {d["metric"]["kind"]: float(d["value"][1]) for d in got["decisions"]}
        published = {q["metric"]["guarantee_hours"]: float(q["value"][1]) for q in got["quota"]}
        applied = {q["metric"]["guarantee_hours"]: float(q["value"][1]) for q in got["preemption_quota"]}
        # The two services are scraped at their own instants: a quota published between the two
        # scrapes shows as the new value at one and the old at the other until the next scrape.
        agree = bool(published) and all(applied.get(h) == v for h, v in published.items())
        complete = (
            all(got.values()) and decisions.get("accepted", 0) >= 3 and len(got["preemption_quota"]) >= 3
            and agree
        )  # fmt: skip
        if complete:
            median = float(got["median"][0]["value"][1])
            return got["buckets"], got["quota"], got["preemption_quota"], decisions, median
        await asyncio.sleep(1.0)
    missing = [f"{name}: {queries[name]}" for name, result in got.items() if not result]
    raise AssertionError(
        f"Prometheus ({PROMETHEUS_URL}) did not have everything after {FIND_DEADLINE_S:.0f}s; "
        f"empty: {missing}; got {got}. Status > Targets (or `up`) says whether "
        f"127.0.0.1:{QUOTA_PORT} and :{PREEMPTION_PORT} are scraped."
    )


async def _dashboard_series(http: aiohttp.ClientSession, pool: str) -> dict[str, list[dict[str, Any]]]:
    """Each dashboard query reading only produced metrics returns a series (keyed by panel title,
    the first query of a panel kept); fails naming the empty ones after FIND_DEADLINE_S."""
    expected = [q for q in dashboard_queries() if not q.metrics() & NOT_PRODUCED]
    assert len(expected) >= 15, [q.expr for q in expected]  # most of the dashboard, not a token few
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FIND_DEADLINE_S
    empty = expected
    got: dict[str, list[dict[str, Any]]] = {}
    while loop.time() < deadline:
        still = []
        for query in empty:
            result = await _query(http, query.promql(pool=pool))
            if result:
                got.setdefault(query.panel, result)
            else:
                still.append(query)
        empty = still
        if not empty:
            return got
        await asyncio.sleep(1.0)
    listed = "\n".join(f"{q.panel} [{q.ref_id}]: {q.promql(pool=pool)}" for q in empty)
    raise AssertionError(f"dashboard queries with no series after {FIND_DEADLINE_S:.0f}s:\n{listed}")
