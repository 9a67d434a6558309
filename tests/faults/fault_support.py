"""Helpers for fault tests: services as child processes on reserved ports, health, waiting on conditions."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gpufair.local.procs import ChildProcess, free_port
from gpufair.local.stack import start_service

HERE = Path(__file__).resolve().parent
PACED_TRAINER = HERE / "paced_trainer.py"
SERVING = health_pb2.HealthCheckResponse.SERVING


@dataclass
class Service:
    """A service child process bound to a port reserved once, so a restart keeps its address."""

    module: str
    env: dict[str, str]
    log_path: Path
    port: int = 0
    child: ChildProcess | None = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.child is not None
        return self.child.proc.pid

    def start(self) -> "Service":
        self.port = self.port or free_port()
        self.child, bound = start_service(self.module, dict(self.env, GPUFAIR_LISTEN=self.addr), self.log_path)
        assert bound == self.port
        return self

    def kill9(self) -> None:
        assert self.child is not None
        self.child.kill()

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop()


def service_env(etcd: str, root: str, workdir: Path, **extra: str) -> dict[str, str]:
    """Environment for service children: loopback etcd, a private key root, short lease and period."""
    env = dict(os.environ, GPUFAIR_ETCD=etcd, GPUFAIR_ETCD_ROOT=root, GPUFAIR_LOG_LEVEL="WARNING", GPUFAIR_LEASE_TTL="3",
               GPUFAIR_PERIOD_S="0.5", GPUFAIR_NODE="fault-node", GPUFAIR_CACHE_DIR=str(workdir / "cache"),
               GPUFAIR_CACHE_CAPACITY="64MiB")
    env.update(extra)
    return env


async def health_status(addr: str, timeout: float = 2.0) -> int | None:
    """The server-wide health status, or None when it does not answer."""
    try:
        async with grpc.aio.insecure_channel(addr) as ch:
            res = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
            return res.status
    except grpc.aio.AioRpcError:
        return None


async def until(pred: Callable[[], Awaitable[bool]], timeout: float, what: str, period: float = 0.1) -> float:
    """Wait until `pred()` is true; returns the seconds it took, fails naming `what` otherwise."""
    t0 = time.monotonic()
    while not await pred():
        assert time.monotonic() - t0 < timeout, f"timed out after {timeout:.0f}s waiting for: {what}"
        await asyncio.sleep(period)
    return time.monotonic() - t0


def read_command_logs(prefix: Path, world: int) -> list[list[dict]]:
    """The split commands each rank of a paced trainer received, in order."""
    out = []
    for rank in range(world):
        path = Path(f"{prefix}.rank{rank}")
        lines = path.read_text().splitlines() if path.exists() else []
        out.append([json.loads(line) for line in lines if line.strip()])
    return out


class SlowProxy:
    """A TCP proxy on the test's event loop that delivers server->client bytes at `rate` bytes/s."""

    def __init__(self, target_port: int, rate: float) -> None:
        self.target_port, self.rate = target_port, rate
        self.port = 0
        self._server: asyncio.AbstractServer | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> "SlowProxy":
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        try:
            sreader, swriter = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            cwriter.close()
            return
        await asyncio.gather(self._pipe(creader, swriter, 0.0), self._pipe(sreader, cwriter, self.rate), return_exceptions=True)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rate: float) -> None:
        try:
            while data := await reader.read(16 * 1024):
                writer.write(data)
                await writer.drain()
                if rate:
                    await asyncio.sleep(len(data) / rate)
        finally:
            writer.close()
