"""One trace per task in the real Jaeger, across every process of the live pipeline.

A tiny live cluster (`gfs serve preemption`, two `gfs serve node-agent` with two fake GPUs each,
`gfs fake-task` workers), every process exporting its spans over OTLP to the stack's Jaeger under
its own OTEL_SERVICE_NAME, and a GfsClient exporting the submit spans: spot tasks A and B run, the
HP task H preempts B (the younger, cheaper one). Jaeger's HTTP query API then holds, for the
preempted task B and for the preempting task H, the trace started by the submit (its id is the
traceparent of the TaskSubmitted record) with:

- the submit: the client's PRODUCER span `submit <task>` (the root);
- the decision: the preemption service's `decide BindCommand` (both) / `decide EvictCommand`
  (B, the victim's trace) spans, children of the submit span (the router forwards each record in
  its own trace);
- the command and the agent's action: the agent's `agent.receive gfs.commands.*`, `agent.verify`
  and `agent.spawn` (the binds) / `agent.sigterm` (B's eviction);
- the ack: the agent's `agent.publish EvictAck` (B) / `agent.publish WorkerStarted` (H).

Every span's parent is in the same trace. The router reads records in batches, in one span per
batch (`route batch`, issue 23: a span per record cost more than routing it); that span links
(FOLLOWS_FROM) to the span of every record it routed: the submissions and the agents' acks.
Services batch their spans (BatchSpanProcessor) and flush them when stopped with SIGTERM; the
test stops them first, then polls Jaeger.

Needs Jaeger (JAEGER_QUERY_URL, JAEGER_OTLP_ENDPOINT; `make up`): fails with instructions without.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from live_cluster import Live, _fake, _pools_ready, _until, live_world
from live_harness import ServiceProcess, Tap
from quota_harness import _free_port
from test_observability_stack import JAEGER_OTLP_ENDPOINT, JAEGER_QUERY_URL, _require

from gfs.schemas.commands import BindCommand, EvictAck, EvictCommand
from gfs.schemas.tasks import TaskClass, TaskEvicted, TaskStarted, TaskSubmitted
from gfs.services.platform.kafka.topic_admin import TopicsReport
from gfs.services.platform.settings import PlatformSettings
from gfs.services.platform.tracing import build_tracer_provider
from gfs.services.preemption.sre.trace_view import register_trace_view
from gfs.services.producers.client import GfsClient

pytestmark = pytest.mark.integration

# Services export every ~5 s (the BatchSpanProcessor's delay) and at shutdown; Jaeger batches too.
FIND_DEADLINE_S = 45.0


class TracedLive(Live):
    """The live cluster of test_live_cluster, every process exporting to Jaeger under its own name."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.base = self.base | {"OTEL_EXPORTER_OTLP_ENDPOINT": JAEGER_OTLP_ENDPOINT}
        self.base.pop("OTEL_SERVICE_NAME", None)
        self.services: dict[str, str] = {}  # role -> OTEL_SERVICE_NAME

    def service_name(self, role: str) -> str:
        return self.services.setdefault(role, f"gfs-it-{role}-{self.run}")

    def agent(self, node: str, pool: str, gpus: int = 2, **env: str) -> ServiceProcess:
        return super().agent(node, pool, gpus, OTEL_SERVICE_NAME=self.service_name(f"agent-{node}"), **env)


@pytest_asyncio.fixture(loop_scope="session")
async def traced(
    database_url: str,
    kafka_bootstrap: str,
    registry_topics: TopicsReport,
    scratch_schema: str,
    tmp_path: Path,
) -> AsyncIterator[TracedLive]:
    await _require("Jaeger's query API", JAEGER_QUERY_URL, "/api/services", "jaeger")
    async with live_world(
        database_url, kafka_bootstrap, scratch_schema, tmp_path, "it-jaeger", make=TracedLive
    ) as world:
        yield world  # type: ignore[misc]  # a TracedLive: `make` built it


def _trace_id_of_submit(tap: Tap, task: str) -> str:
    for _, env, headers in tap.items:
        if isinstance(env.payload, TaskSubmitted) and env.payload.task_id == task:
            parent = dict(headers).get("traceparent", b"").decode()
            assert parent, f"the TaskSubmitted of {task} carries no traceparent: {headers}"
            return parent.split("-")[1]
    raise AssertionError(f"no TaskSubmitted of {task} on gfs.tasks.submit")


async def _trace(trace_id: str) -> dict[str, Any] | None:
    timeout = aiohttp.ClientTimeout(total=5)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as http,
            http.get(f"{JAEGER_QUERY_URL}/api/traces/{trace_id}") as response,
        ):
            if response.status == 404:
                return None
            response.raise_for_status()
            body = await response.json()
    except (aiohttp.ClientError, TimeoutError, OSError):
        return None
    data = body.get("data") or []
    return data[0] if data else None


def _spans(found: dict[str, Any]) -> list[tuple[str, str]]:
    """(operation, service name) of every span of a Jaeger trace."""
    processes = found["processes"]
    return [(s["operationName"], processes[s["processID"]]["serviceName"]) for s in found["spans"]]


async def _wait_for_spans(trace_id: str, want: set[tuple[str, str]]) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FIND_DEADLINE_S
    found: dict[str, Any] | None = None
    while loop.time() < deadline:
        found = await _trace(trace_id)
        if found is not None and want <= set(_spans(found)):
            return found
        await asyncio.sleep(1.0)
    have = sorted(set(_spans(found))) if found else "no trace at all"
    raise AssertionError(
        f"trace {trace_id} in Jaeger ({JAEGER_QUERY_URL}) lacks "
        f"{sorted(want - set(_spans(found or {'spans': [], 'processes': {}})))} "
        f"after {FIND_DEADLINE_S:.0f}s; it has {have}"
    )


async def _batch_links(service: str) -> set[tuple[str, str]]:
    """(trace id, span id) of every span a `route batch` span of `service` links to."""
    timeout = aiohttp.ClientTimeout(total=10)
    query = {"service": service, "operation": "route batch", "limit": "2000", "lookback": "1h"}
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as http,
            http.get(f"{JAEGER_QUERY_URL}/api/traces", params=query) as response,
        ):
            response.raise_for_status()
            body = await response.json()
    except (aiohttp.ClientError, TimeoutError, OSError):
        return set()
    return {
        (r["traceID"], r["spanID"]) for found in body.get("data") or [] for s in found["spans"]
        if s["operationName"] == "route batch"
        for r in s.get("references", []) if r["refType"] == "FOLLOWS_FROM"
    }  # fmt: skip


async def _wait_for_batch_links(service: str, want: set[tuple[str, str]]) -> set[tuple[str, str]]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FIND_DEADLINE_S
    linked: set[tuple[str, str]] = set()
    while loop.time() < deadline:
        linked = await _batch_links(service)
        if want <= linked:
            break
        await asyncio.sleep(1.0)
    return linked


def _check_connected(found: dict[str, Any], root: str) -> None:
    """One trace: every span's parent is one of its spans; the only root is the submit span."""
    ids = {s["spanID"] for s in found["spans"]}
    roots = []
    for span in found["spans"]:
        parents = [r["spanID"] for r in span.get("references", []) if r.get("refType") == "CHILD_OF"]
        if not parents:
            roots.append(span["operationName"])
        for parent in parents:
            assert parent in ids, (
                f"span {span['operationName']} has a parent outside trace {found['traceID']}"
            )
    assert roots == [root], f"trace {found['traceID']} roots: {roots}"


@pytest.mark.asyncio(loop_scope="session")
async def test_preempted_and_preempting_tasks_each_have_one_trace_across_every_process(
    traced: TracedLive, kafka_bootstrap: str
) -> None:
    live = traced
    pool = f"E2E-{live.run}"
    nodes = [f"e2e-{live.run}-n{i}" for i in range(2)]
    port = _free_port()
    preemption = live.service_name("preemption")
    live.preemption("pre-jaeger", port, [pool], OTEL_SERVICE_NAME=preemption)
    for node in nodes:
        live.agent(node, pool)
    # The quota, published inside a span as the quota service publishes it (`quota.persist`): the
    # spot binds' decision spans link to it (services/preemption/service.py, `quota_spans`).
    quota_provider = build_tracer_provider(
        PlatformSettings(
            otel_exporter_otlp_endpoint=JAEGER_OTLP_ENDPOINT, otel_service_name=live.service_name("quota")
        )
    )
    with quota_provider.get_tracer("it").start_as_current_span("quota.persist") as quota_span:
        await live.quota(pool, 4.0, 4)
    quota_ctx = quota_span.get_span_context()
    await asyncio.to_thread(quota_provider.shutdown)
    client_name = live.service_name("client")
    provider = build_tracer_provider(
        PlatformSettings(otel_exporter_otlp_endpoint=JAEGER_OTLP_ENDPOINT, otel_service_name=client_name)
    )
    try:
        await _until(_pools_ready(port, {pool: 2}), 60, "two nodes and a quota")
        async with GfsClient(
            bootstrap_servers=kafka_bootstrap, producer_name="it-jaeger", tracer_provider=provider
        ) as client:

            async def submit(tid: str, cls: TaskClass) -> None:
                await client.submit_new(
                    task_id=tid,
                    tenant="org-it",
                    gpu_model=pool,
                    gpus_per_worker=2,
                    workers=1,
                    task_class=cls,
                    command=_fake(),
                )

            await submit("A", TaskClass.SPOT)
            await live.tap.wait(TaskStarted, lambda e: e.task_id == "A", timeout=40)
            await asyncio.sleep(0.5)
            await submit("B", TaskClass.SPOT)
            (b,) = await live.tap.wait(TaskStarted, lambda e: e.task_id == "B", timeout=40)
            node_b = b.placements[0].node
            # (Whether B's worker checkpoints or dies of the SIGTERM does not matter here: the agent's
            # sigterm span and its EvictAck are there either way.)

            await submit("H", TaskClass.HP)
            (evict,) = await live.tap.wait(EvictCommand, lambda e: e.preemptor_task_id == "H")
            assert evict.task_ids == ("B",) and evict.node == node_b
            await live.tap.wait(EvictAck, lambda e: e.command_id == evict.command_id)
            await live.tap.wait(TaskEvicted, lambda e: e.task_id == "B")
            (bind_h,) = await live.tap.wait(BindCommand, lambda e: e.task_id == "H")
            assert bind_h.node == node_b
            await live.tap.wait(TaskStarted, lambda e: e.task_id == "H", timeout=40)
    except BaseException:
        print(live.logs())
        raise
    finally:
        await asyncio.to_thread(provider.shutdown)  # flushes the submit spans
    # SIGTERM: each service flushes its batched spans on the way out (serve_cli's shutdown).
    await asyncio.to_thread(live.stop_all)
    for proc in live.procs:
        assert proc.proc is not None and proc.proc.returncode is not None, proc.args

    agent_b = live.service_name(f"agent-{node_b}")
    b_id, h_id = _trace_id_of_submit(live.tap, "B"), _trace_id_of_submit(live.tap, "H")
    assert b_id != h_id
    want_b = {
        ("submit B", client_name),
        ("decide BindCommand", preemption),
        ("decide EvictCommand", preemption),
        ("agent.receive gfs.commands.bind", agent_b),
        ("agent.receive gfs.commands.evict", agent_b),
        ("agent.verify", agent_b),
        ("agent.spawn", agent_b),
        ("agent.sigterm", agent_b),
        ("agent.publish EvictAck", agent_b),
    }
    want_h = {
        ("submit H", client_name),
        ("decide BindCommand", preemption),
        ("agent.receive gfs.commands.bind", agent_b),
        ("agent.verify", agent_b),
        ("agent.spawn", agent_b),
        ("agent.publish WorkerStarted", agent_b),
    }
    try:
        trace_b = await _wait_for_spans(b_id, want_b)
        trace_h = await _wait_for_spans(h_id, want_h)
    except BaseException:
        print(live.logs())
        raise
    _check_connected(trace_b, "submit B")
    _check_connected(trace_h, "submit H")
    # No span per routed record; the router's batch spans link to each record's span instead.
    assert not any(op.startswith("process gfs.") for op, _ in _spans(trace_b) + _spans(trace_h))
    span_of = {
        (trace_id, op): s["spanID"] for trace_id, found in ((b_id, trace_b), (h_id, trace_h))
        for s in found["spans"] for op in [s["operationName"]]
    }  # fmt: skip
    routed = {
        "the submission of B": (b_id, span_of[b_id, "submit B"]),
        "the submission of H": (h_id, span_of[h_id, "submit H"]),
        "B's EvictAck": (b_id, span_of[b_id, "agent.publish EvictAck"]),
        "H's WorkerStarted": (h_id, span_of[h_id, "agent.publish WorkerStarted"]),
    }
    linked = await _wait_for_batch_links(preemption, set(routed.values()))
    assert set(routed.values()) <= linked, {what for what, ref in routed.items() if ref not in linked}
    # Each trace is its own task's: H's eviction of B is in B's trace, not in H's.
    assert ("decide EvictCommand", preemption) not in set(_spans(trace_h))
    tags = {t["key"]: t["value"] for s in trace_b["spans"] if s["operationName"] == "decide EvictCommand"
            for t in s.get("tags", [])}  # fmt: skip
    assert tags.get("gfs.task_id") == "B" and tags.get("gfs.node") == node_b, tags
    # The spot task's trace shows the quota that admitted it: its bind decision links (FOLLOWS_FROM)
    # to the quota's span; the HP task's bind does not (HP is not admitted by the spot quota).
    # (The link names the span that published the quota record, a span of the quota's trace.)
    (bind_b,) = [s for s in trace_b["spans"] if s["operationName"] == "decide BindCommand"]
    linked = {r["traceID"] for r in bind_b.get("references", []) if r["refType"] == "FOLLOWS_FROM"}
    assert linked == {format(quota_ctx.trace_id, "032x")}, bind_b.get("references")
    (bind_h,) = [s for s in trace_h["spans"] if s["operationName"] == "decide BindCommand"]
    assert all(r["refType"] == "CHILD_OF" for r in bind_h.get("references", [])), bind_h.get("references")
    print(f"\nJaeger traces: B {JAEGER_QUERY_URL}/api/traces/{b_id} ({len(trace_b['spans'])} spans), "
          f"H {JAEGER_QUERY_URL}/api/traces/{h_id} ({len(trace_h['spans'])} spans)")  # fmt: skip
    # The dashboard's trace page draws the same trace from the real Jaeger (its own UI is a
    # placeholder in the Go-tool build: services/preemption/sre/trace_view.py).
    app = web.Application()
    register_trace_view(app, query_url=JAEGER_QUERY_URL)
    async with TestClient(TestServer(app)) as page_client:
        page = await page_client.get(f"/dashboard/trace/{b_id}")
        text = await page.text()
    assert page.status == 200, text
    assert f"{len(trace_b['spans'])} spans" in text and "<svg" in text
    for operation, _ in want_b:
        assert operation in text, operation
