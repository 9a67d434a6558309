"""Logging, OpenTelemetry tracing and metrics; configured only from a `__main__`.

Nothing is exported unless switched on by environment: GPUFAIR_PROMETHEUS_PORT
serves a Prometheus scrape endpoint, OTEL_EXPORTER_OTLP_ENDPOINT sends traces
and metrics to a collector. With neither, the API's no-op providers are used.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from typing import TypeVar

from opentelemetry import metrics, trace

from gpufair.common.config import CommonConfig, parse_endpoint

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: Histogram buckets for durations in seconds (OpenTelemetry's default ones are for milliseconds).
SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level, logging.INFO),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def setup_telemetry(config: CommonConfig, service_name: str) -> int | None:
    """Install meter and tracer providers as configured; returns the Prometheus port, if any."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    resource = Resource.create({"service.name": service_name, "service.instance.id": config.node})
    readers = []
    prom_port: int | None = None
    if config.prometheus_port is not None:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import start_http_server

        # The scrape endpoint binds the host the gRPC port binds (GPUFAIR_LISTEN): one exposure for both.
        host = parse_endpoint(config.listen, "GPUFAIR_LISTEN")[0]
        server, _thread = start_http_server(config.prometheus_port, addr=host)
        prom_port = int(server.server_port)
        readers.append(PrometheusMetricReader())
        logger.info("Prometheus metrics on http://%s:%d/metrics", host, prom_port)
    if config.otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
        logger.info("OTLP export to %s", config.otlp_endpoint)
    if readers:
        metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=readers))
    return prom_port


def on_loop(loop: "asyncio.AbstractEventLoop", fn: Callable[[], T], timeout: float = 2.0) -> T:
    """Run `fn` on the service's event loop and return its result.

    Metric callbacks run on the exporter's thread (a Prometheus scrape, the
    OTLP timer) while the loop mutates the state they read; reading it on the
    loop itself keeps every observation consistent.
    """
    try:
        if asyncio.get_running_loop() is loop:
            return fn()
    except RuntimeError:
        pass  # no loop in this thread: the usual case

    async def call() -> T:
        return fn()

    return asyncio.run_coroutine_threadsafe(call(), loop).result(timeout)
