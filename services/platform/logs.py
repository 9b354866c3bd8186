"""Process logging for the services: text lines for people, JSON lines for log pipelines.

`configure_logging` is called once by a command's composition root (`gfs serve ...`); nothing here
runs at import. In JSON mode every line is one object with `time`, `level`, `logger`, `message`,
`service`, the pool when one is known (`extra={"pool": ...}` or inside `log_pool(...)`), any other
`extra` fields, and `trace_id`/`span_id` (lowercase hex, as Jaeger shows them) when the line was
logged inside a span, so a log line joins its trace. The trace context comes from OpenTelemetry's
logging instrumentation (it stamps each record from the current span); python-json-logger writes
the JSON.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import IO, Any, Literal

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# The pool a task of the service is working on, for lines that do not name it themselves.
_current_pool: ContextVar[str | None] = ContextVar("gfs_log_pool", default=None)

# What the instrumentation adds that a log line should not carry as is: the "0" ids outside a span
# are dropped, the sampling flag and its own service name (ours is static) too.
_INSTRUMENTATION_FIELDS = ("otelTraceSampled", "otelServiceName")
_NO_ID = "0"


@contextmanager
def log_pool(pool: str) -> Iterator[None]:
    """Lines logged inside carry `pool` (JSON mode)."""
    token = _current_pool.set(pool)
    try:
        yield
    finally:
        _current_pool.reset(token)


class _PoolField(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "pool", None) is None:
            pool = _current_pool.get()
            if pool is not None:
                record.pool = pool
        return True


def _json_formatter(service: str) -> logging.Formatter:
    from pythonjsonlogger.json import JsonFormatter

    class _Formatter(JsonFormatter):
        def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
            for name in _INSTRUMENTATION_FIELDS:
                log_data.pop(name, None)
            for name in ("trace_id", "span_id"):
                if log_data.get(name) == _NO_ID:
                    del log_data[name]
            return log_data

    return _Formatter(
        "{asctime}{levelname}{name}{message}",
        style="{",
        rename_fields={
            "asctime": "time",
            "levelname": "level",
            "name": "logger",
            "otelTraceID": "trace_id",
            "otelSpanID": "span_id",
        },
        static_fields={"service": service},
    )


def configure_logging(
    *, service: str, log_format: LogFormat = "text", level: str = "INFO", stream: IO[str] | None = None
) -> logging.Handler:
    """Route the root logger to one handler on `stream` (default stderr) in `log_format`.

    Replaces handlers configured before (a second call, or basicConfig), so a process never writes
    each line twice. Returns the handler (tests read what it wrote).
    """
    from opentelemetry.instrumentation.logging import LoggingInstrumentor

    instrumentor = LoggingInstrumentor()
    if not instrumentor.is_instrumented_by_opentelemetry:
        # Stamps otelTraceID/otelSpanID on every record from the span current when it is logged.
        # Logs are not exported through OpenTelemetry (no handler of its own): lines go to stderr.
        instrumentor.instrument(inject_trace_context=True, enable_log_auto_instrumentation=False)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.addFilter(_PoolField())
    handler.setFormatter(_json_formatter(service) if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    return handler
