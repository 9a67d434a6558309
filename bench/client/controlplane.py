"""A real control plane for the client benchmarks: etcd, metrics and scheduler as child processes."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gpufair.local import EtcdServer
from gpufair.local.procs import stop_all
from gpufair.local.stack import start_service


def wait_serving(address: str, timeout: float = 60.0) -> None:
    """Block until the server's standard health service says SERVING (its dependencies answer)."""
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(address) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        while True:
            try:
                if stub.Check(health_pb2.HealthCheckRequest(), timeout=2).status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{address} did not become SERVING in {timeout:.0f}s")
            time.sleep(0.1)


@contextlib.contextmanager
def control_plane(workdir: Path, policy: str = "even") -> Iterator[dict[str, str]]:
    """Start etcd, `python -m gpufair.metrics` and `python -m gpufair.scheduler` on free loopback ports.

    Yields the environment a trainer needs (GPUFAIR_METRICS_ADDR, GPUFAIR_SCHEDULER_ADDR).
    `policy=even` keeps the scheduler from re-splitting on its own, so every
    split change in a benchmark is one the benchmark made.
    """
    handles: list = []
    try:
        etcd = EtcdServer(workdir=workdir / "etcd").start()
        handles.append(etcd)
        env = dict(os.environ, GPUFAIR_ETCD=etcd.endpoint, GPUFAIR_LISTEN="127.0.0.1:0", GPUFAIR_LOG_LEVEL="WARNING",
                   GPUFAIR_POLICY=policy, GPUFAIR_PERIOD_S="1", GPUFAIR_LEASE_TTL="5")
        for var in ("GPUFAIR_PROMETHEUS_PORT", "OTEL_EXPORTER_OTLP_ENDPOINT", "GPUFAIR_ADMIN_TOKEN", "GPUFAIR_DISABLE"):
            env.pop(var, None)
        metrics, mport = start_service("gpufair.metrics", env, workdir / "metrics.log")
        handles.append(metrics)
        env["GPUFAIR_METRICS_ADDR"] = f"127.0.0.1:{mport}"
        scheduler, sport = start_service("gpufair.scheduler", env, workdir / "scheduler.log")
        handles.append(scheduler)
        wait_serving(f"127.0.0.1:{sport}")
        yield {"GPUFAIR_METRICS_ADDR": env["GPUFAIR_METRICS_ADDR"], "GPUFAIR_SCHEDULER_ADDR": f"127.0.0.1:{sport}"}
    finally:
        stop_all(handles)
        for h in handles:
            if isinstance(h, EtcdServer):
                h.close()
