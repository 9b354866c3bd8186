"""Metrics: one OpenTelemetry MeterProvider per process, read out in Prometheus format.

`configure_metrics` builds the provider with a `PrometheusMetricReader` that writes into a
registry of its own (not prometheus_client's global one, so tests and several services in one
process never collide), and `metrics_handler` serves that registry on `/metrics` (aiohttp). The
provider is passed down by the composition root; nothing here is set up at import.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import Meter
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from prometheus_client import CollectorRegistry, generate_latest

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Buckets of every histogram in seconds (unit "s": decision latency, SIGTERM latency). The SDK's
# default boundaries (0, 5, 10, 25, ... 10000) are made for milliseconds: every latency of these
# services would fall in the first bucket and histogram_quantile would say nothing.
SECONDS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                   60.0)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Metrics:
    provider: MeterProvider
    registry: CollectorRegistry

    def meter(self, name: str) -> Meter:
        return self.provider.get_meter(name)

    def render(self) -> bytes:
        """The current values in Prometheus' text format."""
        return generate_latest(self.registry)

    def shutdown(self) -> None:
        self.provider.shutdown()


def configure_metrics(service_name: str) -> Metrics:
    registry = CollectorRegistry(auto_describe=True)
    reader = PrometheusMetricReader(registry=registry)
    seconds = View(
        instrument_type=Histogram,
        instrument_unit="s",
        aggregation=ExplicitBucketHistogramAggregation(SECONDS_BUCKETS),
    )
    provider = MeterProvider(
        metric_readers=[reader], resource=Resource.create({SERVICE_NAME: service_name}), views=[seconds]
    )
    return Metrics(provider, registry)


def metrics_handler(metrics: Metrics) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(_request: web.Request) -> web.Response:
        return web.Response(body=metrics.render(), headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})

    return handle
