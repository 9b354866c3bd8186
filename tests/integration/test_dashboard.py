"""The preemption service's SRE dashboard (`/dashboard`) in headless Chromium (Debian's package).

A `gfs serve preemption` subprocess on the real broker and Postgres decides for a unique pool of
two 2-GPU nodes (the test plays the agents: telemetry, WorkerStarted, EvictAck): two spot tasks
run, an HP task evicts one. The quota service's latest pool forecast sits in `quota_input_latest`
of the same database (written here as the quota service writes it). Chromium loads the page
(`--dump-dom`): every value it shows for the pool (nodes, capacity, quota, queues, forecast) and
the latest decisions (task, kind, order) equal what the API says (`/pools`, `/decisions`), each
decision links to its task's trace in Jaeger (the trace id of the submit), the plots are SVG, and a
screenshot is kept as the test's artifact under `.stack/artifacts/` (its path is printed).

Fails (not skips) when Chromium is missing: `bash infra/chromium/install.sh` (run by `make setup`).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Coroutine
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
import pytest_asyncio
from live_cluster import ack_like_agents
from live_harness import REPO, ServiceProcess, Tap, tap_and_producer
from quota_harness import _forecast, _free_port, _migrated

from gfs.schemas.envelope import wrap
from gfs.schemas.quota import GuaranteeQuota, SpotQuota
from gfs.schemas.tasks import TaskClass, TaskEvicted, TaskStarted, TaskSubmitted
from gfs.schemas.telemetry import GpuSample, NodeTelemetry
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.platform.signing import node_key, sign
from gfs.services.producers.client import GfsClient

pytestmark = pytest.mark.integration

ARTIFACTS = REPO / ".stack" / "artifacts"
TAPPED = ("gfs.tasks.submit", "gfs.commands.bind", "gfs.commands.evict", "gfs.tasks.lifecycle")
JAEGER_UI = "http://jaeger.example:16686"  # links only: nothing is fetched from it


def _chromium() -> str:
    found = os.environ.get("CHROMIUM_BIN") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.fail(
            "no Chromium for the dashboard test: install Debian's package with "
            "`bash infra/chromium/install.sh` "
            "(as root; `make setup` runs it) or point CHROMIUM_BIN at a chromium binary, then re-run.",
            pytrace=False,
        )
    return found


def _run_chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
           f"--user-data-dir={profile}", "--hide-scrollbars", *args]  # fmt: skip
    # Its own session: a timeout kills chromium's helper processes too.
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=os.environ | {"HOME": str(profile)},
    )
    try:
        out, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        raise AssertionError(f"chromium timed out: {cmd}\n{err[-3000:]}") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


class _Values(HTMLParser):
    """Text of every element with a `data-k` attribute, and the href of links that have one."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, str] = {}
        self.links: dict[str, str] = {}
        self.images: list[str] = []
        self._open: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "img" and a.get("src"):
            self.images.append(str(a["src"]))
        key = a.get("data-k")
        if key:
            self._open.append((tag, key))
            self.values[key] = ""
            if tag == "a" and a.get("href"):
                self.links[key] = str(a["href"])

    def handle_endtag(self, tag: str) -> None:
        if self._open and self._open[-1][0] == tag:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        if self._open:
            key = self._open[-1][1]
            self.values[key] += data


class World:
    def __init__(self, dsn: str, kafka: str, tmp: Path, tap: Tap, producer: EnvelopeProducer) -> None:
        self.run = uuid.uuid4().hex[:8]
        self.pool = f"DASH-{self.run}"
        self.dsn, self.kafka, self.tmp, self.tap, self.producer = dsn, kafka, tmp, tap, producer
        self.port = _free_port()
        self.proc: ServiceProcess | None = None
        self.secret = "it-dash-" + uuid.uuid4().hex

    async def report(self, topic_name: str, message: Any) -> None:
        """An agent's message, signed with its node's key as the agent signs it."""
        key = node_key(self.secret.encode(), message.node)
        await self.producer.send(topic_name, wrap(sign(message, key=key), producer="it"))

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | {
            "DATABASE_URL": self.dsn,
            "KAFKA_BOOTSTRAP_SERVERS": self.kafka,
            "PYTHONUNBUFFERED": "1",
            "GFS_COMMAND_SECRET": self.secret,
            "JAEGER_UI_URL": JAEGER_UI,
            "PREEMPTION_API_PORT": str(self.port),
            "PREEMPTION_POOLS": self.pool,
            "PREEMPTION_INSTANCE": f"dash-{self.run}",
            "PREEMPTION_GROUP": f"it-dash-pre-{self.run}",
            "PREEMPTION_ROUTER_GROUP": f"it-dash-router-{self.run}",
            "PREEMPTION_INBOX_TOPIC": f"it-dash-inbox-{self.run}",
            "PREEMPTION_INBOX_PARTITIONS": "1",
            "PREEMPTION_TICK_S": "0.2",
            "PREEMPTION_GRACE_S": "2",
            "PREEMPTION_ACK_MARGIN_S": "3",
            "PREEMPTION_NODE_TIMEOUT_S": "600",
        }
        self.proc = ServiceProcess(["serve", "preemption"], env, self.tmp / "preemption.log").start()

    async def get(self, path: str) -> Any:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http,
            http.get(f"http://127.0.0.1:{self.port}{path}") as response,
        ):
            assert response.status == 200, (path, response.status, await response.text())
            if response.content_type == "application/json":
                return await response.json()
            return response.content_type, await response.read()


@pytest_asyncio.fixture(loop_scope="session")
async def world(
    database_url: str,
    kafka_bootstrap: str,
    registry_topics: TopicsReport,
    scratch_schema: str,
    tmp_path: Path,
) -> AsyncIterator[World]:
    _chromium()
    dsn = await _migrated(database_url, scratch_schema)
    async with tap_and_producer(kafka_bootstrap, TAPPED, "it-dash") as (tap, producer):
        w = World(dsn, kafka_bootstrap, tmp_path, tap, producer)
        try:
            yield w
        finally:
            if w.proc is not None:
                w.proc.stop()


def _ack_like_agents(w: World) -> Coroutine[Any, Any, None]:
    """WorkerStarted for every bind and an EvictAck for every eviction of the pool's nodes."""
    return ack_like_agents(w.tap, lambda c: c.node.startswith(w.pool.lower()), w.report, pid=4242)


async def _until(check: Any, timeout: float, what: str) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        try:
            found = await check()
        except (AssertionError, aiohttp.ClientError, OSError):
            found = None
        if found:
            return found
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _trace_ids(tap: Tap) -> dict[str, str]:
    out = {}
    for _, env, headers in tap.items:
        if isinstance(env.payload, TaskSubmitted):
            parent = dict(headers).get("traceparent", b"").decode()
            if parent:
                out[env.payload.task_id] = parent.split("-")[1]
    return out


@pytest.mark.asyncio(loop_scope="session")
async def test_dashboard_in_headless_chromium_shows_what_the_api_says(world: World) -> None:
    w, pool = world, world.pool
    chromium = _chromium()
    now = datetime.now(UTC)
    # The quota service's latest pool forecast, as it stores it (same database).
    forecast = _forecast(pool, now, (1.0, 3.0, 2.0, 1.5), tenants=1)
    connection = await asyncpg.connect(w.dsn)
    try:
        await connection.execute(
            "INSERT INTO quota_input_latest (pool, kind, as_of, payload) "
            "VALUES ($1, 'forecast', $2, $3::jsonb)",
            pool,
            forecast.origin_time,
            forecast.model_dump_json(),
        )
        # The quota service's stored inputs for 1 h and 2 h (the page shows the shortest's).
        await connection.execute(
            "INSERT INTO quota_pool (pool, capacity_gpus, eta) VALUES ($1, 4, 0.5)", pool
        )
        await connection.executemany(
            "INSERT INTO spot_quota (pool, guarantee_hours, quota_gpus, min_free_gpus, eta, pool_version, "
            "computed_at) VALUES ($1, $2, $3, $4, 0.5, 1, now())",
            [(pool, 1, 1.5, 3), (pool, 2, 0.5, 1)],
        )
    finally:
        await connection.close()
    w.start()
    acking = asyncio.create_task(_ack_like_agents(w))
    try:
        for i in range(2):
            samples = tuple(
                GpuSample(index=g, utilisation_pct=0, memory_used_mib=0, memory_total_mib=80_000)
                for g in range(2)
            )
            node = NodeTelemetry(node=f"{pool.lower()}-n{i}", gpu_model=pool, sampled_at=now, gpus=samples)
            await w.report("gfs.nodes.telemetry", node)
        quota = SpotQuota(
            pool=pool,
            quotas=tuple(GuaranteeQuota(guarantee_hours=h, quota_gpus=4.0) for h in (1, 2, 4)),
            eta=1.0,
            capacity_gpus=4,
            valid_from=now,
            valid_until=now + timedelta(hours=1),
            forecast_version=f"it-{pool}:1",
        )
        await w.producer.send("gfs.quotas", wrap(quota, producer="it"))

        async def ready() -> bool:
            body = await w.get("/pools")
            p = body["pools"].get(pool)
            return bool(p) and p["nodes"] == 2 and bool(p["quota_version"])

        await _until(ready, 60, "two nodes and a quota at the service")
        async with GfsClient(bootstrap_servers=w.kafka, producer_name="it-dash") as client:
            for tid, cls in (
                ("s1", TaskClass.SPOT),
                ("s2", TaskClass.SPOT),
                ("h1", TaskClass.HP),
                ("h2", TaskClass.HP),
                ("s3", TaskClass.SPOT),
            ):
                await client.submit_new(
                    task_id=f"{pool}-{tid}",
                    tenant="org-it",
                    gpu_model=pool,
                    gpus_per_worker=2,
                    workers=1,
                    task_class=cls,
                    command=("true",),
                )
                if tid in ("s1", "s2"):
                    await w.tap.wait(TaskStarted, lambda e, t=tid: e.task_id == f"{pool}-{t}", timeout=30)
        await w.tap.wait(TaskEvicted, lambda e: e.task_id.startswith(pool), count=2, timeout=30)
        await w.tap.wait(
            TaskStarted, lambda e: e.task_id in (f"{pool}-h1", f"{pool}-h2"), count=2, timeout=30
        )

        # Settled: the API's view does not change across the page load.
        bucket = "?bucket_s=60&window_s=3600"
        for _attempt in range(5):
            pools_before, decisions_before = await w.get("/pools"), await w.get("/decisions?limit=20")
            dom = _run_chromium(
                chromium, w.tmp / "chromium", "--dump-dom", f"http://127.0.0.1:{w.port}/dashboard{bucket}"
            )
            pools_after, decisions_after = await w.get("/pools"), await w.get("/decisions?limit=20")
            if (pools_before, decisions_before) == (pools_after, decisions_after):
                break
            await asyncio.sleep(1.0)
        else:
            raise AssertionError("the service's state kept changing")
        assert dom.returncode == 0 and "<table" in dom.stdout, (dom.returncode, dom.stderr[-3000:])
        page = _Values()
        page.feed(dom.stdout)
        v = page.values

        # Pools: what /pools says.
        api = pools_after["pools"][pool]
        k = f"pool:{pool}"
        assert v[f"{k}:name"] == pool
        for field in ("nodes", "capacity_gpus", "hp_running", "hp_queued", "spot_running", "spot_queued"):
            assert v[f"{k}:{field}"] == str(api[field]), (field, v[f"{k}:{field}"], api[field])
        assert v[f"{k}:quota_version"] == api["quota_version"]
        assert v[f"{k}:quota_gpus"] == ", ".join(f"{h} h: {q:g}" for h, q in api["quota_gpus"].items())
        assert v[f"{k}:forecast"] == "p0.9 peak 3 GPUs over 4 h", v[f"{k}:forecast"]
        assert (v[f"{k}:spare"], v[f"{k}:eta"]) == ("3", "0.50"), (v[f"{k}:spare"], v[f"{k}:eta"])
        assert (api["hp_running"], api["spot_running"], api["spot_queued"]) == (2, 0, 3)

        # The latest decisions, in order, as /decisions has them; links to each task's trace.
        traces = _trace_ids(w.tap)
        shown = [(v[f"decision:{i}:task_id"], v[f"decision:{i}:kind"]) for i in range(len(decisions_after))]
        assert shown == [(d["task_id"], d["kind"]) for d in decisions_after]
        assert f"decision:{len(decisions_after)}:kind" not in v
        kinds = {kind for _, kind in shown}
        assert {"evicted", "started"} <= kinds, kinds
        for i, d in enumerate(decisions_after):
            if d["task_id"]:
                assert d["detail"]["trace_id"] == traces[d["task_id"]], d  # recorded with the decision
                assert page.links[f"decision:{i}:trace"] == f"{JAEGER_UI}/trace/{traces[d['task_id']]}"
        evicted = next(i for i, d in enumerate(decisions_after) if d["kind"] == "evicted")
        # In words: who was evicted, where, for whom, and how it compared (decision_text.py).
        shown_why, ev = v[f"decision:{evicted}:explanation"], decisions_after[evicted]
        said = f"evicted {ev['task_id']} from {ev['detail']['node']} for HP {ev['detail']['preemptor']}: "
        assert shown_why.startswith(said) and "cost" in shown_why, shown_why
        assert page.links[f"decision:{evicted}:explain"] == f"/explain/{ev['task_id']}"
        assert int(v["evictions:total"]) == 2

        # The JSON behind it and the plots (server-side SVG, nothing from a CDN).
        data = await w.get(f"/dashboard/data{bucket}")
        assert data["pools"][pool]["forecast"]["hp_demand_quantile"] == [1.0, 3.0, 2.0, 1.5]
        assert sum(data["evictions"]["by_pool"][pool].values()) == 2
        assert {"/dashboard/quota.svg", "/dashboard/queues.svg", f"/dashboard/evictions.svg{bucket}"} <= {
            i.replace("&amp;", "&") for i in page.images
        }  # fmt: skip
        for path in ("/dashboard/quota.svg", "/dashboard/queues.svg", f"/dashboard/evictions.svg{bucket}"):
            content_type, body = await w.get(path)
            assert content_type == "image/svg+xml" and b"<svg" in body[:2000], path
        assert "http://" not in dom.stdout.replace(f"http://127.0.0.1:{w.port}", "").replace(
            JAEGER_UI, ""
        ).replace("http://www.w3.org", ""), "the page loads something from elsewhere"

        # The screenshot, kept as the test's artifact.
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / f"dashboard-{w.run}.png"
        out = _run_chromium(
            chromium,
            w.tmp / "chromium",
            f"--screenshot={shot}",
            "--window-size=1280,1600",
            "--virtual-time-budget=5000",
            f"http://127.0.0.1:{w.port}/dashboard{bucket}",
        )
        assert out.returncode == 0 and shot.exists() and shot.stat().st_size > 20_000, (
            out.returncode,
            out.stderr[-2000:],
        )
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        (ARTIFACTS / f"dashboard-{w.run}.json").write_text(json.dumps(data, indent=1))
        print(f"\ndashboard screenshot: {shot}")
    except BaseException:
        if w.proc is not None:
            print(w.proc.tail(60))
        raise
    finally:
        acking.cancel()
