"""The SRE APIs answer what their OpenAPI documents say (issue 26, item 3), on the real broker and
Postgres: a preemption service deciding a real pool and a quota service quoting one, every route
of each document called, every JSON answer (200s and the errors) validated against the document
the service serves at /openapi.json, which is also the checked-in copy under docs/api.

The quota service is started with only GFS_HTTP_HOST set (127.0.0.2, a loopback address other than
the default): its API answers there and not on 127.0.0.1, so the setting is what binds it.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from jsonschema import Draft202012Validator
from preemption_world import Cluster, _api_settings, _registered, _service, _until
from quota_harness import READY_S, _free_port, _hand_worked, _migrated, _start_at_the_end
from quota_harness import _settings as _quota_settings

from gfs.schemas.commands import BindCommand
from gfs.schemas.envelope import wrap
from gfs.schemas.tasks import TaskClass
from gfs.services.api_docs import DOCS_DIR
from gfs.services.platform.kafka.producer import EnvelopeProducer
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.preemption.router.routing import ROUTED_TOPICS
from gfs.services.quota.service import TOPICS, run_quota_service

pytestmark = pytest.mark.integration
TOKEN = "it-openapi-token"


def check(doc: dict[str, Any], method: str, path: str, status: int, body: Any) -> None:
    """`body` is what `doc` promises for `method path` answering `status` (its JSON Schema, with
    the document's components for the $refs)."""
    answers = doc["paths"][path][method.lower()]["responses"]
    assert str(status) in answers, (method, path, status, body)
    schema = answers[str(status)]["content"]["application/json"]["schema"]
    rooted = {**schema, "components": doc["components"]}  # "#/components/..." resolves from here
    errors = sorted(Draft202012Validator(rooted).iter_errors(body), key=lambda e: list(e.path))
    assert not errors, (method, path, [f"{list(e.path)}: {e.message}" for e in errors[:5]])


class Client:
    def __init__(self, http: aiohttp.ClientSession, base: str, doc: dict[str, Any]) -> None:
        self.http, self.base, self.doc = http, base, doc
        self.called: set[tuple[str, str]] = set()

    async def call(self, method: str, route: str, url: str, *, want: int = 200, **kw: Any) -> Any:
        async with self.http.request(method, self.base + url, **kw) as response:
            text = await response.text()
            assert response.status == want, (method, url, response.status, text)
            self.called.add((method, route))
            if response.content_type != "application/json":
                media = self.doc["paths"][route][method.lower()]["responses"][str(want)]["content"]
                assert response.content_type in media, (url, response.content_type)
                return text
        body = json.loads(text)
        check(self.doc, method, route, want, body)
        return body


async def _served_document(http: aiohttp.ClientSession, base: str, name: str) -> dict[str, Any]:
    async with http.get(f"{base}/openapi.json") as response:
        assert response.status == 200 and response.content_type == "application/json"
        doc: dict[str, Any] = await response.json()
    assert doc == json.loads((DOCS_DIR / f"{name}.openapi.json").read_text())  # the checked-in copy
    return doc


@pytest.mark.asyncio(loop_scope="session")
async def test_every_preemption_route_answers_its_document(
    world: tuple[Cluster, str], kafka_bootstrap: str
) -> None:
    c, dsn = world
    port, settings = _api_settings(dsn, kafka_bootstrap, c.pool, preemption_admin_token=TOKEN)
    # The router reads only what this test publishes: on a long-lived stack, reading the shared
    # topics from their start took minutes before the test's node and quota were registered.
    await _start_at_the_end(kafka_bootstrap, settings.preemption_router_group, ROUTED_TOPICS)
    async with _service(settings) as (decider, _), aiohttp.ClientSession() as http:
        base = f"http://127.0.0.1:{port}"
        doc = await _served_document(http, base, "preemption")
        api = Client(http, base, doc)
        api.called.add(("GET", "/openapi.json"))
        await c.telemetry(c.node(0), 2)
        await c.quota(2.0)
        await _until(_registered(decider, c.pool, 1), timeout=60)
        await c.submit("S", TaskClass.SPOT)
        (bind,) = await c.tap.wait(BindCommand, lambda b: b.task_id == "S", timeout=120)  # decided
        assert bind.task_id == "S"
        auth = {"Authorization": f"Bearer {TOKEN}"}
        await api.call("GET", "/healthz", "/healthz")
        await api.call("GET", "/readyz", "/readyz")
        pools = await api.call("GET", "/pools", "/pools")
        assert pools["pools"][c.pool]["nodes"] == 1 and pools["pools"][c.pool]["capacity_gpus"] == 2
        explained = await api.call("GET", "/explain/{task_id}", "/explain/S")
        assert explained["decisions"] and {d["task_id"] for d in explained["decisions"]} == {"S"}
        await c.submit("Q", TaskClass.SPOT)  # no room left: queued, with a live explanation
        await _until(lambda: "Q" in decider.owned_pools()[c.pool].seen, timeout=120)
        queued = await api.call("GET", "/explain/{task_id}", "/explain/Q")
        assert queued["live"] is not None
        assert (await api.call("GET", "/decisions", "/decisions?limit=5"))[0]["pool"] == c.pool
        await api.call("GET", "/metrics", "/metrics")
        body = {"who": "it", "reason": "contract test", "pool": c.pool}
        kill, quota, cap = "/controls/kill-switch", "/controls/quota", "/controls/eviction-cap"
        await api.call("POST", kill, kill, json=body | {"on": True}, headers=auth)
        await api.call("POST", kill, kill, json=body | {"on": False}, headers=auth)
        override = body | {"mode": "override", "quota_gpus": {"1": 1}}
        await api.call("POST", quota, quota, json=override, headers=auth)
        await api.call("POST", quota, quota, json=body | {"mode": "clear"}, headers=auth)
        await api.call("POST", cap, cap, json=body | {"max_evictions": 3, "interval_s": 60}, headers=auth)
        await api.call("GET", "/controls", "/controls")
        assert len(await api.call("GET", "/controls/audit", f"/controls/audit?limit=3&pool={c.pool}")) == 3
        budget = "/controls/tenant-budget"  # a tenant's, in force in every pool (no pool in the body)
        per_tenant = {"who": "it", "reason": "contract test", "tenant": "org-it", "max_evictions": 2}
        await api.call("POST", budget, budget, json=per_tenant, headers=auth)
        await api.call("POST", budget, budget, json=per_tenant | {"max_evictions": None}, headers=auth)
        await api.call("POST", budget, budget, json=per_tenant | {"pool": c.pool}, headers=auth, want=400)
        data = await api.call("GET", "/dashboard/data", "/dashboard/data?limit=5")
        assert c.pool in data["pools"]
        await api.call("GET", "/dashboard", "/dashboard")
        for plot in ("quota", "evictions", "queues"):
            route = f"/dashboard/{plot}.svg"
            await api.call("GET", route, f"{route}?window_s=3600&bucket_s=60")
        # The errors the document lists answer its Error body: bad input, auth.
        await api.call("GET", "/decisions", "/decisions?limit=abc", want=400)
        await api.call("GET", "/pools", "/pools?verbose=1", want=400)
        await api.call("GET", "/dashboard/data", "/dashboard/data?limit=-3", want=400)
        await api.call("GET", "/dashboard/trace/{trace_id}", "/dashboard/trace/not-hex!", want=400)
        await api.call("POST", kill, kill, json=body | {"on": True}, want=401)
        await api.call("POST", quota, quota, json=body | {"mode": "thaw"}, headers=auth, want=400)
        await api.call("POST", cap, cap, json=body | {"max_evictions": -1}, headers=auth, want=400)
        # The trace page's 200 needs Jaeger (tests/unit/preemption/test_trace_view.py): its 400 here.
    assert api.called >= {(m.upper(), p) for p, item in doc["paths"].items() for m in item}


@pytest.mark.asyncio(loop_scope="session")
async def test_the_quota_api_answers_its_document_on_gfs_http_host(
    registry_topics: TopicsReport,
    kafka_bootstrap: str,
    database_url: str,
    scratch_schema: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dsn = await _migrated(database_url, scratch_schema)
    pool = f"P-{uuid.uuid4().hex[:8]}"
    monkeypatch.delenv("QUOTA_API_HOST", raising=False)
    monkeypatch.setenv("GFS_HTTP_HOST", "127.0.0.2")
    port = _free_port()
    settings = _quota_settings(dsn, kafka_bootstrap, random.getrandbits(48), quota_api_port=port)
    assert settings.quota_api_host is None and settings.gfs_http_host == "127.0.0.2"
    await _start_at_the_end(kafka_bootstrap, settings.quota_group, TOPICS)
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(run_quota_service(settings, stop, ready=ready))
    try:
        await asyncio.wait_for(ready.wait(), READY_S)
        now = datetime.now(UTC)
        async with EnvelopeProducer(bootstrap_servers=kafka_bootstrap) as producer:
            status, forecast = _hand_worked(pool, now)
            await producer.send("gfs.pools.status", wrap(status, producer="it"))
            await producer.send("gfs.forecasts", wrap(forecast, producer="it"))
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.ClientConnectionError):  # not on the default address
                async with http.get(f"http://127.0.0.1:{port}/healthz"):
                    pass
            base = f"http://127.0.0.2:{port}"
            doc = await _served_document(http, base, "quota")
            api = Client(http, base, doc)
            api.called.add(("GET", "/openapi.json"))
            for _ in range(200):
                quotas = await api.call("GET", "/quotas", "/quotas")
                if pool in quotas and quotas[pool]["forecast"] is not None:
                    break
                await asyncio.sleep(0.1)
            # Floor 50 + 5 = 55 over q90 [40.5, 60, 10, 10]: spare [45, 40, 45, 45], eta 1.
            assert quotas[pool]["quota_gpus"] == {"1": 45.0, "2": 40.0, "4": 40.0}
            health = await api.call("GET", "/forecast-health", "/forecast-health")
            assert health[pool]["target"] == 0.9
            await api.call("GET", "/healthz", "/healthz")
            await api.call("GET", "/readyz", "/readyz")
            await api.call("GET", "/metrics", "/metrics")
            await api.call("GET", "/quotas", "/quotas?pool=x", want=400)  # it takes no parameter
        assert api.called >= {(m.upper(), p) for p, item in doc["paths"].items() for m in item}
    finally:
        stop.set()
        await asyncio.wait_for(task, READY_S)
