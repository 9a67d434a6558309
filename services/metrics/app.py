"""Wiring of the metrics service: store + servicer + housekeeping on the shared server."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import grpc

from gpufair.api.metrics.v1 import metrics_service_pb2 as pb
from gpufair.api.metrics.v1 import metrics_service_pb2_grpc as pb_grpc
from gpufair.common.config import CommonConfig
from gpufair.common.server import RunningServer, ServerDeps, ServiceBinding, create_server
from gpufair.metrics.servicer import MetricsServicer
from gpufair.metrics.store import MetricsStore

logger = logging.getLogger(__name__)
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["MetricsService"].full_name


async def _always_ready() -> bool:
    # Telemetry lives in memory: the service depends on nothing to serve.
    return True


def build_deps(store: MetricsStore, interceptors: Sequence[grpc.aio.ServerInterceptor] = ()) -> ServerDeps:
    servicer = MetricsServicer(store)
    return ServerDeps(
        services=[ServiceBinding(SERVICE_NAME, lambda s: pb_grpc.add_MetricsServiceServicer_to_server(servicer, s))],
        readiness=_always_ready,
        interceptors=interceptors,
    )


async def expire_loop(store: MetricsStore, period_s: float = 10.0) -> None:
    while True:
        await asyncio.sleep(period_s)
        store.expire()


async def start(config: CommonConfig, store: MetricsStore | None = None, interceptors: Sequence[grpc.aio.ServerInterceptor] = ()) -> tuple[RunningServer, MetricsStore]:
    """Start a metrics server (tests and `__main__`)."""
    store = store or MetricsStore()
    running = await create_server(config, build_deps(store, interceptors))
    return running, store
