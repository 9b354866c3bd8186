"""W3C trace context in Kafka headers: inject, extract, round trip."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from gfs.services.platform.settings import PlatformSettings
from gfs.services.platform.tracing import (
    build_tracer_provider,
    extract_context,
    inject_headers,
    traceparent_of,
)

# A valid traceparent written out by hand: version 00, 16-byte trace id, 8-byte span id, sampled.
_TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
_SPAN_ID = 0x00F067AA0BA902B7
_TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def tracer() -> trace.Tracer:
    # A local SDK provider (not the global one), so tests never leak tracing state.
    return TracerProvider().get_tracer("test")


def test_inject_writes_traceparent_of_the_current_span(tracer: trace.Tracer) -> None:
    with tracer.start_as_current_span("send") as span:
        headers = inject_headers()
    ctx = span.get_span_context()
    expected = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
    assert dict(headers)["traceparent"].decode() == expected


def test_extract_reads_the_hand_written_traceparent() -> None:
    parent = trace.get_current_span(extract_context([("traceparent", _TRACEPARENT.encode())]))
    ctx = parent.get_span_context()
    assert (ctx.trace_id, ctx.span_id, ctx.is_remote) == (_TRACE_ID, _SPAN_ID, True)


def test_round_trip_keeps_trace_id_and_tracestate(tracer: trace.Tracer) -> None:
    incoming = [("traceparent", _TRACEPARENT.encode()), ("tracestate", b"vendor=abc")]
    with tracer.start_as_current_span("process", context=extract_context(incoming)) as child:
        outgoing = inject_headers()
    assert child.get_span_context().trace_id == _TRACE_ID
    child_span_id = child.get_span_context().span_id
    assert traceparent_of(outgoing).startswith(f"00-{_TRACE_ID:032x}-{child_span_id:016x}-")
    assert dict(outgoing)["tracestate"] == b"vendor=abc"


def test_inject_without_a_span_adds_nothing_and_keeps_other_headers() -> None:
    assert inject_headers([("content-type", b"application/json")]) == [("content-type", b"application/json")]


def test_inject_replaces_a_stale_traceparent_and_does_not_mutate_input(tracer: trace.Tracer) -> None:
    original = [("TraceParent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01"), ("x", b"y")]
    snapshot = list(original)
    with tracer.start_as_current_span("send"):
        headers = inject_headers(original)
    assert original == snapshot
    names = [name.lower() for name, _ in headers]
    assert names.count("traceparent") == 1
    assert ("x", b"y") in headers


@pytest.mark.parametrize(
    "headers",
    [None, [], [("traceparent", b"garbage")], [("traceparent", b"\xff\xfe")]],
    ids=["none", "empty", "malformed", "not-utf8"],
)
def test_missing_or_bad_trace_context_gives_no_parent(headers: list[tuple[str, bytes]] | None) -> None:
    span = trace.get_current_span(extract_context(headers))
    assert not span.get_span_context().is_valid


def test_header_names_match_case_insensitively() -> None:
    ctx = trace.get_current_span(extract_context([("TRACEPARENT", _TRACEPARENT.encode())])).get_span_context()
    assert ctx.trace_id == _TRACE_ID


def _processors(provider: TracerProvider) -> tuple[object, ...]:
    # The SDK keeps its processors on a multi-processor; reading it is the only way to see
    # whether an exporter was wired without exporting anything.
    return tuple(provider._active_span_processor._span_processors)


def test_provider_without_endpoint_exports_nothing() -> None:
    settings = PlatformSettings(otel_service_name="gfs-quota", otel_exporter_otlp_endpoint=None)
    provider = build_tracer_provider(settings)
    assert provider.resource.attributes["service.name"] == "gfs-quota"
    assert _processors(provider) == ()


def test_provider_with_endpoint_batches_to_otlp() -> None:
    settings = PlatformSettings(otel_exporter_otlp_endpoint="http://127.0.0.1:4317")
    provider = build_tracer_provider(settings)
    [processor] = _processors(provider)
    assert isinstance(processor, BatchSpanProcessor)
    provider.shutdown()
