"""JSON log lines join their traces: trace_id/span_id of the span they were logged in, service, pool."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider

from gfs.services.platform.logs import TEXT_FORMAT, configure_logging, log_pool


@pytest.fixture
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_json_line_carries_the_span_it_was_logged_in(restore_root: None) -> None:
    stream = io.StringIO()
    configure_logging(service="quota", log_format="json", stream=stream)
    log = logging.getLogger("gfs.test")
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("decide") as span:
        log.info("quota %s for %s", 12, "A100", extra={"pool": "A100", "version": 7})
        context = span.get_span_context()
    log.warning("outside any span")

    inside, outside = _lines(stream)
    assert inside["message"] == "quota 12 for A100"
    assert inside["level"] == "INFO" and inside["logger"] == "gfs.test" and inside["service"] == "quota"
    assert inside["trace_id"] == f"{context.trace_id:032x}"
    assert inside["span_id"] == f"{context.span_id:016x}"
    assert inside["pool"] == "A100" and inside["version"] == 7
    assert "time" in inside
    assert "trace_id" not in outside and "span_id" not in outside
    assert outside["level"] == "WARNING"
    assert not any(key.startswith("otel") for line in (inside, outside) for key in line)


def test_the_pool_context_names_the_pool_unless_the_line_does(restore_root: None) -> None:
    stream = io.StringIO()
    configure_logging(service="preemption", log_format="json", stream=stream)
    log = logging.getLogger("gfs.test")
    with log_pool("H800"):
        log.info("pass")
        log.info("moved", extra={"pool": "A10"})
    log.info("after")
    first, second, third = _lines(stream)
    assert first["pool"] == "H800" and second["pool"] == "A10" and "pool" not in third


def test_text_stays_the_default_and_a_second_call_does_not_double_lines(restore_root: None) -> None:
    stream = io.StringIO()
    configure_logging(service="quota", stream=io.StringIO())
    handler = configure_logging(service="quota", stream=stream, level="warning")
    assert isinstance(handler.formatter, logging.Formatter) and handler.formatter._fmt == TEXT_FORMAT
    logging.getLogger("gfs.test").info("hidden at WARNING")
    logging.getLogger("gfs.test").warning("shown once")
    assert stream.getvalue().count("shown once") == 1 and "hidden" not in stream.getvalue()
    assert logging.getLogger().handlers == [handler]
