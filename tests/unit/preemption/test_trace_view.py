"""The dashboard's trace page: a Jaeger query-API answer (written by hand, in Jaeger's JSON shape)
drawn as rows and an SVG waterfall; Jaeger here is a stand-in HTTP server (the page's own port)."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gfs.services.preemption.sre.trace_view import register_trace_view, span_rows

TRACE: dict[str, Any] = {
    "traceID": "abc123",
    "spans": [
        # Out of order on purpose: rows come sorted by start.
        {"traceID": "abc123", "spanID": "s3", "operationName": "agent.spawn", "startTime": 1_000_250_000,
         "duration": 4_000, "processID": "p2",
         "references": [{"refType": "CHILD_OF", "traceID": "abc123", "spanID": "s2"}]},
        {"traceID": "abc123", "spanID": "s1", "operationName": "submit T", "startTime": 1_000_000_000,
         "duration": 1_500, "processID": "p1", "references": []},
        {"traceID": "abc123", "spanID": "s2", "operationName": "decide BindCommand",
         "startTime": 1_000_048_000, "duration": 0, "processID": "p3",
         "references": [{"refType": "CHILD_OF", "traceID": "abc123", "spanID": "s1"}]},
    ],
    "processes": {"p1": {"serviceName": "client"}, "p2": {"serviceName": "agent-n0"},
                  "p3": {"serviceName": "preemption"}},
}  # fmt: skip


def test_rows_are_offsets_from_the_first_span_with_their_nesting() -> None:
    rows = span_rows(TRACE)
    # Microseconds in Jaeger: 48,000 us after the submit = 48 ms; 250,000 us = 250 ms; 4,000 us = 4 ms.
    assert [(r.service, r.operation, r.start_ms, r.duration_ms, r.depth) for r in rows] == [
        ("client", "submit T", 0.0, 1.5, 0),
        ("preemption", "decide BindCommand", 48.0, 0.0, 1),
        ("agent-n0", "agent.spawn", 250.0, 4.0, 2),
    ]
    assert span_rows({"spans": []}) == []


@pytest.mark.asyncio
async def test_the_page_draws_the_trace_jaeger_returns_and_says_when_it_has_none() -> None:
    jaeger = web.Application()

    async def traces(request: web.Request) -> web.Response:
        if request.match_info["trace_id"] == "abc123":
            return web.json_response({"data": [TRACE]})
        missing = {"data": None, "errors": [{"code": 404, "msg": "trace not found"}]}
        return web.json_response(missing, status=404)

    jaeger.router.add_get("/api/traces/{trace_id}", traces)
    async with TestServer(jaeger) as fake_jaeger:
        app = web.Application()
        register_trace_view(app, query_url=str(fake_jaeger.make_url("")))
        async with TestClient(TestServer(app)) as client:
            found = await client.get("/dashboard/trace/abc123")
            text = await found.text()
            assert found.status == 200
            assert "3 spans from 3 services" in text and "<svg" in text
            assert text.index("submit T") < text.index("decide BindCommand") < text.index("agent.spawn")
            assert (await client.get("/dashboard/trace/ffff")).status == 404
            assert (await client.get("/dashboard/trace/not-hex!")).status == 400
