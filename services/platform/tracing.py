"""OpenTelemetry wiring and W3C trace-context propagation through Kafka headers.

Nothing happens at import: `configure_tracing` is called once by a service's composition root.
Without an OTLP endpoint no exporter is installed and spans stay in-process (the API's no-op
tracer still forwards the *parent* span context, so trace ids keep flowing from producer to
consumer to the next producer even when nothing is exported).

Kafka headers are a list of `(str, bytes)` pairs; the getter/setter below adapt them to the
OTel text-map propagator, which speaks `str -> str` carriers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagators.textmap import Getter, Setter, TextMapPropagator
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gfs.services.platform.settings import PlatformSettings

KafkaHeaders = list[tuple[str, bytes]]

# The instrumentation scope name under which the platform's spans appear.
TRACER_NAME = "gfs.platform"

# W3C trace context only (traceparent/tracestate): what the brief and the OTel collector expect,
# and independent of whatever global propagator a host process may have installed.
_W3C = TraceContextTextMapPropagator()


class _HeaderGetter(Getter[Sequence[tuple[str, bytes]]]):
    def get(self, carrier: Sequence[tuple[str, bytes]], key: str) -> list[str] | None:
        # Header names are case-insensitive in W3C; Kafka keeps whatever case was written.
        values = [
            value.decode("utf-8", errors="replace")
            for name, value in carrier
            if name.lower() == key.lower() and value is not None
        ]
        return values or None

    def keys(self, carrier: Sequence[tuple[str, bytes]]) -> list[str]:
        return [name for name, _ in carrier]


class _HeaderSetter(Setter[KafkaHeaders]):
    def set(self, carrier: KafkaHeaders, key: str, value: str) -> None:
        # Replace rather than append: a re-published record must not carry two traceparents.
        carrier[:] = [(name, raw) for name, raw in carrier if name.lower() != key.lower()]
        carrier.append((key, value.encode("utf-8")))


HEADER_GETTER = _HeaderGetter()
HEADER_SETTER = _HeaderSetter()


def build_tracer_provider(settings: PlatformSettings) -> TracerProvider:
    """An SDK TracerProvider named after OTEL_SERVICE_NAME, not yet installed globally.

    With OTEL_EXPORTER_OTLP_ENDPOINT set, spans are batched to an OTLP/gRPC exporter; without it
    no processor is added (no console output, nothing exported).
    """
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: settings.otel_service_name}))
    if settings.otel_exporter_otlp_endpoint:
        # Imported lazily: the gRPC exporter pulls in grpcio, which only exporting services need.
        # Creating it opens no connection; the first export does.
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=settings.otel_exporter_otlp_endpoint)
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def configure_tracing(settings: PlatformSettings) -> TracerProvider:
    """Build the provider and install it as the process-wide one (call once, from `main.py`).

    Returns it so the caller can `shutdown()` it on exit and flush pending spans. OpenTelemetry
    allows one global provider per process; a second call keeps the first (and logs a warning).
    """
    provider = build_tracer_provider(settings)
    trace.set_tracer_provider(provider)
    return provider


def inject_headers(
    headers: Iterable[tuple[str, bytes]] = (),
    *,
    context: otel_context.Context | None = None,
    propagator: TextMapPropagator = _W3C,
) -> KafkaHeaders:
    """Return a copy of `headers` with traceparent/tracestate for `context` (default: current).

    When there is no valid span in the context nothing is added; the input is never mutated.
    """
    carrier: KafkaHeaders = list(headers)
    propagator.inject(carrier, context=context, setter=HEADER_SETTER)
    return carrier


def extract_context(
    headers: Sequence[tuple[str, bytes]] | None,
    *,
    propagator: TextMapPropagator = _W3C,
) -> otel_context.Context:
    """The trace context carried in Kafka `headers` (an empty context when there is none or it is
    malformed: a bad traceparent starts a new trace rather than failing the message)."""
    return propagator.extract(list(headers or ()), getter=HEADER_GETTER)


def traceparent_of(headers: Sequence[tuple[str, bytes]] | None) -> str | None:
    """The raw traceparent header value, for logs and dead-letter records."""
    values = HEADER_GETTER.get(list(headers or ()), "traceparent")
    return values[0] if values else None
