"""`/dashboard/trace/{trace_id}`: one task's trace as a span waterfall, read from Jaeger's query API.

The stack's Jaeger is built from the Go module proxy as a Go tool (infra/jaeger), and the module
carries no UI assets (Jaeger's UI is a separate npm build), so its own UI answers with a placeholder
page while its HTTP query API works. SREs still want to look at a trace: this page asks the query
API (`/api/traces/{id}`) for the trace and draws every span on one time axis (service, operation,
start, duration, nesting), with the same matplotlib SVG plots as the dashboard. With a full Jaeger
build (`JAEGER_UI_URL`), the dashboard's links to Jaeger's own trace page work as well.
"""

from __future__ import annotations

import asyncio
import html
import os
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from gfs.services.platform.openapi import bad_request
from gfs.services.preemption.sre.api_spec import API
from gfs.services.preemption.sre.plots import PLOT_LOCK, figure, svg

JAEGER_QUERY_URL = "http://127.0.0.1:16686"  # the stack's Jaeger; JAEGER_QUERY_URL overrides


@dataclass(frozen=True, slots=True)
class SpanRow:
    service: str
    operation: str
    start_ms: float  # from the trace's first span
    duration_ms: float
    depth: int  # 0: a root; parents by CHILD_OF / FOLLOWS_FROM references


def span_rows(trace: dict[str, Any]) -> list[SpanRow]:
    """The spans of one Jaeger trace (its `data[0]` object), ordered by start."""
    spans = trace.get("spans") or []
    if not spans:
        return []
    processes = trace.get("processes") or {}
    by_id = {s["spanID"]: s for s in spans}
    parent: dict[str, str] = {}
    for s in spans:
        for ref in s.get("references") or []:
            if ref.get("spanID") in by_id and ref.get("traceID", trace.get("traceID")) == s.get("traceID"):
                parent[s["spanID"]] = ref["spanID"]
                break

    def depth(span_id: str) -> int:
        seen = 0
        while span_id in parent and seen < len(spans):  # bounded: a malformed cycle cannot loop
            span_id = parent[span_id]
            seen += 1
        return seen

    t0 = min(int(s["startTime"]) for s in spans)
    rows = [
        SpanRow(
            service=str((processes.get(s.get("processID"), {}) or {}).get("serviceName", "?")),
            operation=str(s.get("operationName", "")),
            start_ms=(int(s["startTime"]) - t0) / 1000.0,
            duration_ms=int(s.get("duration", 0)) / 1000.0,
            depth=depth(s["spanID"]),
        )
        for s in spans
    ]
    return sorted(rows, key=lambda r: (r.start_ms, r.depth, r.service, r.operation))


def waterfall_svg(rows: list[SpanRow]) -> bytes:
    """Every span as a bar on one time axis, first at the top, coloured by service."""
    with PLOT_LOCK:
        fig, (ax,) = figure(1, max(1.2, 0.28 * len(rows) + 0.8))
        services = sorted({r.service for r in rows})
        colours = {name: f"C{i % 10}" for i, name in enumerate(services)}
        y = list(range(len(rows)))
        # A zero-length span (an instant) still gets a visible sliver.
        widths = [max(r.duration_ms, 0.05) for r in rows]
        ax.barh(y, widths, left=[r.start_ms for r in rows], color=[colours[r.service] for r in rows])
        ax.set_yticks(y, [f"{'  ' * r.depth}{r.operation}" for r in rows], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("ms since the trace's first span")
        for name in services:
            ax.barh([], [], color=colours[name], label=name)
        ax.legend(fontsize=7, loc="lower right")
        return svg(fig)


def render_trace_page(trace_id: str, rows: list[SpanRow], svg: bytes, source: str) -> str:
    e = html.escape
    body = "".join(
        f"<tr><td>{e(r.service)}</td><td>{'&nbsp;' * 2 * r.depth}{e(r.operation)}</td>"
        f"<td>{r.start_ms:.1f}</td><td>{r.duration_ms:.1f}</td></tr>"
        for r in rows
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>GFS trace {e(trace_id)}</title>
<style>body{{font-family:sans-serif;margin:1.5em}}
td,th{{padding:2px 8px;text-align:left}}</style></head>
<body><h1>Trace {e(trace_id)}</h1>
<p>{len(rows)} spans from {len({r.service for r in rows})} services;
from <a href="{e(source)}">Jaeger's query API</a>.
<a href="/dashboard">Back to the dashboard</a>.</p>
<div class="waterfall">{svg.decode("utf-8")}</div>
<table id="spans">
<tr><th>service</th><th>operation</th><th>start (ms)</th><th>duration (ms)</th></tr>{body}</table>
</body></html>
"""


def register_trace_view(app: web.Application, *, query_url: str | None = None) -> None:
    """Add `/dashboard/trace/{trace_id}` to the SRE API `app`."""
    base = (query_url or os.environ.get("JAEGER_QUERY_URL") or JAEGER_QUERY_URL).rstrip("/")

    async def page(request: web.Request) -> web.Response:
        API.query(request)  # it takes none (api_spec.py): 400 for any
        trace_id = request.match_info["trace_id"]
        if not trace_id.isalnum() or len(trace_id) > 32:
            raise bad_request("trace_id", trace_id, "up to 32 hex digits")
        source = f"{base}/api/traces/{trace_id}"
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http,
                http.get(source) as response,
            ):
                if response.status == 404:
                    raise web.HTTPNotFound(text=_missing(trace_id))
                response.raise_for_status()
                found = await response.json()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise web.HTTPBadGateway(text=f"Jaeger's query API at {base} did not answer: {exc!r}") from None
        traces = found.get("data") or []
        if not traces:
            raise web.HTTPNotFound(text=_missing(trace_id))
        rows = span_rows(traces[0])
        picture = await asyncio.to_thread(waterfall_svg, rows)
        return web.Response(text=render_trace_page(trace_id, rows, picture, source), content_type="text/html")

    app.router.add_get("/dashboard/trace/{trace_id}", page)


def _missing(trace_id: str) -> str:
    return f"Jaeger has no trace {trace_id} (yet: services send their spans in batches)"
