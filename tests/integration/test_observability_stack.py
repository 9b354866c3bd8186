"""Jaeger and Prometheus of the script-started stack (`make up`), as real processes: a span exported
by the platform's tracer provider is found through Jaeger's query API, and a counter served by the
platform's `/metrics` handler is scraped by Prometheus and found through its query API.

Where they are: JAEGER_QUERY_URL (default http://127.0.0.1:16686), JAEGER_OTLP_ENDPOINT (default
http://127.0.0.1:4317, OTLP gRPC) and PROMETHEUS_URL (default http://127.0.0.1:9090). When they
do not answer, the tests FAIL (not skip) with instructions, like the rest of the integration tier.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest
import pytest_asyncio
import yaml
from aiohttp import web

from gfs.services.platform.metrics import configure_metrics, metrics_handler
from gfs.services.platform.settings import PlatformSettings
from gfs.services.platform.tracing import build_tracer_provider

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS_YML = REPO / "infra" / "prometheus" / "prometheus.yml"
JAEGER_QUERY_URL = os.environ.get("JAEGER_QUERY_URL", "http://127.0.0.1:16686").rstrip("/")
JAEGER_OTLP_ENDPOINT = os.environ.get("JAEGER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
PROMETHEUS_URL = os.environ.get("PROMETHEUS_URL", "http://127.0.0.1:9090").rstrip("/")

HOW_TO_START = (
    "{what} does not answer at {url} ({error}). Start the stack with `make up` (or just this part: "
    "`infra/{script}/start.sh && infra/{script}/wait.sh`), then re-run pytest; "
    "`infra/stack.sh status` says what runs."
)
# The service may still be finishing its start when the session begins.
CONNECT_DEADLINE_S = 20.0
# Jaeger batches spans (~200 ms) before they are queryable; Prometheus scrapes every 5 s.
FIND_DEADLINE_S = 30.0
TIMEOUT = aiohttp.ClientTimeout(total=5)

T = TypeVar("T")


async def _eventually(probe: Callable[[], Awaitable[T | None]], deadline_s: float) -> T | None:
    """`probe()` until it returns something other than None, or None after `deadline_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deadline_s
    while True:
        found = await probe()
        if found is not None or loop.time() > deadline:
            return found
        await asyncio.sleep(0.5)


async def _answers(url: str) -> str | None:
    """None when `url` answers 2xx, else the reason it did not (for the failure message)."""
    try:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as http, http.get(url) as response:
            return None if response.status < 300 else f"HTTP {response.status}"
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"


async def _require(what: str, url: str, probe_path: str, script: str) -> None:
    error: str | None = "not tried"

    async def ready() -> bool | None:
        nonlocal error
        error = await _answers(url + probe_path)
        return True if error is None else None

    if await _eventually(ready, CONNECT_DEADLINE_S) is None:
        pytest.fail(HOW_TO_START.format(what=what, url=url, error=error, script=script), pytrace=False)


@pytest_asyncio.fixture(loop_scope="session")
async def jaeger() -> str:
    await _require("Jaeger's query API", JAEGER_QUERY_URL, "/api/services", "jaeger")
    return JAEGER_QUERY_URL


@pytest_asyncio.fixture(loop_scope="session")
async def prometheus() -> str:
    await _require("Prometheus", PROMETHEUS_URL, "/-/ready", "prometheus")
    return PROMETHEUS_URL


async def _get_json(url: str, params: dict[str, str]) -> Any:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http, http.get(url, params=params) as response:
        response.raise_for_status()
        return await response.json()


def _tags(span: dict[str, Any]) -> dict[str, Any]:
    return {tag["key"]: tag["value"] for tag in span.get("tags", [])}


async def test_a_span_exported_over_otlp_is_found_in_jaeger_with_its_attributes(jaeger: str) -> None:
    service = f"gfs-it-{uuid.uuid4().hex[:12]}"
    settings = PlatformSettings(otel_exporter_otlp_endpoint=JAEGER_OTLP_ENDPOINT, otel_service_name=service)
    provider = build_tracer_provider(settings)
    try:
        tracer = provider.get_tracer("gfs.it.observability")
        with tracer.start_as_current_span(
            "observability-probe", attributes={"gfs.pool": "A100-80G", "gfs.gpus": 4}
        ) as span:
            trace_id = format(span.get_span_context().trace_id, "032x")
        # Off the event loop: the flush blocks until the batch is exported (or times out).
        flushed = await asyncio.to_thread(provider.force_flush, 10_000)
        assert flushed, f"the span was not exported to {JAEGER_OTLP_ENDPOINT} within 10 s"
    finally:
        await asyncio.to_thread(provider.shutdown)

    async def find() -> list[dict[str, Any]] | None:
        body = await _get_json(f"{jaeger}/api/traces", {"service": service, "limit": "5"})
        return body.get("data") or None

    traces = await _eventually(find, FIND_DEADLINE_S)
    assert traces, f"no trace of service {service} in Jaeger ({jaeger}) after {FIND_DEADLINE_S:.0f}s"
    [found] = traces
    assert found["traceID"] == trace_id
    [probe] = [s for s in found["spans"] if s["operationName"] == "observability-probe"]
    assert found["processes"][probe["processID"]]["serviceName"] == service
    tags = _tags(probe)
    assert tags["gfs.pool"] == "A100-80G"
    assert tags["gfs.gpus"] == 4
    # The service is listed for the UI's search box too.
    services = await _get_json(f"{jaeger}/api/services", {})
    assert service in services["data"]


def _node_agent_targets() -> list[tuple[str, int]]:
    """The loopback targets prometheus.yml scrapes for node agents (the 9101-9110 convention)."""
    config = yaml.safe_load(PROMETHEUS_YML.read_text())
    [job] = [j for j in config["scrape_configs"] if j["job_name"] == "gfs-node-agent"]
    assert config["global"]["scrape_interval"] == "5s"
    targets = [t for group in job["static_configs"] for t in group["targets"]]
    return [(host, int(port)) for host, _, port in (t.rpartition(":") for t in targets)]


def _free_target() -> tuple[str, int]:
    # The last ports first: a node agent started by hand would most likely take 9101.
    for host, port in reversed(_node_agent_targets()):
        with socket.socket() as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
            return host, port
    pytest.fail("every node-agent port that prometheus.yml scrapes is taken")


@pytest_asyncio.fixture(loop_scope="session")
async def scraped_endpoint() -> AsyncIterator[tuple[str, Any]]:
    """The platform's /metrics handler on a node-agent port Prometheus scrapes; yields the
    target ("host:port") and the Metrics object to record into."""
    metrics = configure_metrics("gfs-it-observability")
    app = web.Application()
    app.router.add_get("/metrics", metrics_handler(metrics))
    runner = web.AppRunner(app)
    await runner.setup()
    host, port = _free_target()
    await web.TCPSite(runner, host, port).start()
    try:
        yield f"{host}:{port}", metrics
    finally:
        await runner.cleanup()
        metrics.shutdown()


async def test_prometheus_scrapes_a_metrics_endpoint_on_a_node_agent_port(
    prometheus: str, scraped_endpoint: tuple[str, Any]
) -> None:
    target, metrics = scraped_endpoint
    probe = uuid.uuid4().hex[:12]
    counter = metrics.meter("gfs.it.observability").create_counter("gfs_it_probe", description="probe")
    counter.add(7, {"probe": probe})

    query = f'gfs_it_probe_total{{probe="{probe}"}}'

    async def find() -> list[dict[str, Any]] | None:
        body = await _get_json(f"{prometheus}/api/v1/query", {"query": query})
        assert body["status"] == "success", body
        return body["data"]["result"] or None

    result = await _eventually(find, FIND_DEADLINE_S)
    assert result, f"Prometheus ({prometheus}) has no {query} after {FIND_DEADLINE_S:.0f}s (target {target})"
    [sample] = result
    assert sample["metric"]["job"] == "gfs-node-agent"
    assert sample["metric"]["instance"] == target
    assert float(sample["value"][1]) == 7.0
