"""`gpufair status`: are the three services, etcd and S3 reachable and serving?

etcd is seen through the scheduler: only services hold etcd clients (and only
they may reach etcd in the deployments), and the scheduler reports SERVING
only while its etcd answers and its job registry is loaded.
"""

from __future__ import annotations

import argparse
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gpufair.client.cli.common import EXIT_FAIL, EXIT_OK, Endpoints, add_json_flag, in_range, print_json, table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="check the metrics, scheduler and cache services, etcd and S3")
    p.add_argument("--timeout", type=in_range(float, 0.1, 60, "seconds"), default=2.0, help="seconds per check (default 2)")
    add_json_flag(p)
    p.set_defaults(func=status)


def _s3(endpoint: str, timeout: float) -> tuple[bool, str]:
    # Any HTTP answer means the endpoint is up: MinIO answers its health path with 200;
    # other S3 servers (AWS, moto) answer it 403 or 404, which is no failure.
    url = endpoint if "://" in endpoint else f"http://{endpoint}"
    try:
        urllib.request.urlopen(url + "/minio/health/live", timeout=timeout)  # noqa: S310 - operator-given endpoint
        return True, "reachable (MinIO, healthy)"
    except urllib.error.HTTPError:
        return True, "reachable"
    except (urllib.error.URLError, socket.timeout, OSError) as exc:
        return False, str(getattr(exc, "reason", exc))


def _service(ep: Endpoints, address: str, timeout: float) -> tuple[bool, str]:
    try:
        with ep.channel(address) as ch:
            res = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=timeout)
        name = health_pb2.HealthCheckResponse.ServingStatus.Name(res.status)
        return res.status == health_pb2.HealthCheckResponse.SERVING, name
    except grpc.RpcError as exc:
        return False, exc.code().name if hasattr(exc, "code") else "error"


def _etcd(scheduler: tuple[bool, str]) -> tuple[bool, str]:
    ok, detail = scheduler
    if ok:
        return True, "answers the scheduler"
    if detail == "NOT_SERVING":
        return False, "the scheduler is NOT_SERVING: etcd unreachable, or its registry still loading"
    return False, f"unknown: the scheduler is unreachable ({detail})"


def status(args: argparse.Namespace) -> int:
    ep = Endpoints.from_env()
    results = []

    def check(name: str, address: str, probe: Callable[[], tuple[bool, str]]) -> tuple[bool, str]:
        t0 = time.perf_counter()
        ok, detail = probe()
        results.append({"component": name, "address": address, "ok": ok, "detail": detail, "ms": round((time.perf_counter() - t0) * 1000, 1)})
        return ok, detail

    scheduler = check("scheduler", ep.scheduler, lambda: _service(ep, ep.scheduler, args.timeout))
    check("etcd", "via the scheduler", lambda: _etcd(scheduler))
    check("s3", ep.s3, lambda: _s3(ep.s3, args.timeout))
    check("metrics", ep.metrics, lambda: _service(ep, ep.metrics, args.timeout))
    check("cache", ep.cache, lambda: _service(ep, ep.cache, args.timeout))
    if args.json:
        print_json({"ok": all(r["ok"] for r in results), "components": results})
    else:
        print(table(["COMPONENT", "ADDRESS", "OK", "DETAIL"], [[r["component"], r["address"], "yes" if r["ok"] else "NO", r["detail"]] for r in results]))
    return EXIT_OK if all(r["ok"] for r in results) else EXIT_FAIL
