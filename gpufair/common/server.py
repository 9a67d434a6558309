"""The asyncio gRPC server every gpufair service runs on.

`create_server(config, deps)` builds a started server with the services in
`deps`, the standard health service (NOT_SERVING until the readiness probe
answers, and again while draining) and reflection; `serve()` runs it until
SIGTERM/SIGINT and stops it with a grace period.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from gpufair.common.channels import SERVER_OPTIONS
from gpufair.common.config import CommonConfig
from gpufair.common.tasks import stop_task
from gpufair.common.interceptors import ErrorInterceptor

logger = logging.getLogger(__name__)

Readiness = Callable[[], Awaitable[bool]]


@dataclass(frozen=True)
class ServiceBinding:
    """One gRPC service to mount: its full name and the generated `add_*_to_server`."""

    name: str
    add: Callable[[grpc.aio.Server], None]


@dataclass(frozen=True)
class ServerDeps:
    """What a service brings to the shared server."""

    services: Sequence[ServiceBinding]
    readiness: Readiness
    interceptors: Sequence[grpc.aio.ServerInterceptor] = ()
    readiness_period_s: float = 1.0


@dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    health: health.aio.HealthServicer
    service_names: list[str]
    _monitor: asyncio.Task[None] | None = field(default=None, repr=False)

    async def set_serving(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ["", *self.service_names]:
            await self.health.set(name, status)

    async def stop(self, grace: float = 5.0) -> None:
        """Drain: report NOT_SERVING, stop accepting, give RPCs `grace` seconds."""
        await stop_task(self._monitor)
        await self.set_serving(False)
        await self.server.stop(grace)


def _credentials(config: CommonConfig) -> grpc.ServerCredentials | None:
    tls = config.tls
    if not tls.enabled:
        return None
    key, cert = Path(tls.key_file).read_bytes(), Path(tls.cert_file).read_bytes()
    client_ca = Path(tls.client_ca_file).read_bytes() if tls.client_ca_file else None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None)


async def _watch_readiness(running: RunningServer, readiness: Readiness, period: float) -> None:
    last: bool | None = None
    while True:
        try:
            ready = bool(await asyncio.wait_for(readiness(), timeout=max(period, 1.0) * 3))
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - an exploding probe means not ready
            logger.debug("readiness probe failed", exc_info=True)
            ready = False
        if ready != last:
            logger.info("health: %s", "SERVING" if ready else "NOT_SERVING")
            await running.set_serving(ready)
            last = ready
        await asyncio.sleep(period)


async def create_server(config: CommonConfig, deps: ServerDeps) -> RunningServer:
    """Build, bind and start a server; returns it with the port it bound."""
    server = grpc.aio.server(
        interceptors=[*deps.interceptors, ErrorInterceptor()],
        options=[("grpc.max_receive_message_length", 8 * 1024 * 1024), ("grpc.so_reuseport", 0), *SERVER_OPTIONS],
    )
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for binding in deps.services:
        binding.add(server)
    names = [b.name for b in deps.services]
    reflection.enable_server_reflection([*names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME], server)
    creds = _credentials(config)
    port = server.add_secure_port(config.listen, creds) if creds else server.add_insecure_port(config.listen)
    if port == 0:
        raise RuntimeError(f"could not bind {config.listen}")
    running = RunningServer(server, port, health_servicer, names)
    await running.set_serving(False)
    await server.start()
    running._monitor = asyncio.create_task(_watch_readiness(running, deps.readiness, deps.readiness_period_s), name="readiness")
    return running


async def serve(config: CommonConfig, deps: ServerDeps, *, on_started: Callable[[int], None] | None = None, grace: float = 5.0, cleanup: Callable[[], Awaitable[None]] | None = None) -> None:
    """Run until SIGTERM or SIGINT, then drain with `grace` and run `cleanup`."""
    running = await create_server(config, deps)
    logger.info("listening on port %d", running.port)
    if on_started:
        on_started(running.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    logger.info("shutting down (grace %.1fs)", grace)
    await running.stop(grace)
    if cleanup:
        await cleanup()
