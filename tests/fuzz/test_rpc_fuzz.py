"""Every RPC of every service, fed hostile messages: a clear status every time, never INTERNAL, never a hang."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings

from gpufair.api.cache.v1 import cache_service_pb2 as cpb
from gpufair.api.metrics.v1 import metrics_service_pb2 as mpb
from gpufair.api.scheduler.v1 import scheduler_service_pb2 as spb
from gpufair.local.stack import start_service
from proto_strategies import messages

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SERVICES = {"metrics": mpb.DESCRIPTOR.services_by_name["MetricsService"],
            "scheduler": spb.DESCRIPTOR.services_by_name["SchedulerService"],
            "cache": cpb.DESCRIPTOR.services_by_name["CacheService"]}
METHODS = [(name, m) for name, svc in SERVICES.items() for m in svc.methods]
UNARY_DEADLINE_S = 15.0
STREAM_DEADLINE_S = 1.5  # streams may rightly wait for news; they must answer or fail before this, or just be open
# Client errors only; INTERNAL and UNKNOWN mean the server crashed on input.
CLEAR = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION,
         grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.OUT_OF_RANGE,
         grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED}


@pytest.fixture(scope="module")
def addrs(etcd_server, s3_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The three services as child processes on port 0, in a key root of their own."""
    work = tmp_path_factory.mktemp("fuzz")
    env = dict(os.environ, GPUFAIR_ETCD=etcd_server.endpoint, GPUFAIR_ETCD_ROOT=f"/fuzz-{uuid.uuid4().hex[:8]}",
               GPUFAIR_LISTEN="127.0.0.1:0", GPUFAIR_LOG_LEVEL="ERROR", GPUFAIR_LEASE_TTL="3", GPUFAIR_PERIOD_S="0.5",
               GPUFAIR_S3_ENDPOINT=s3_server.endpoint, GPUFAIR_S3_ACCESS_KEY=s3_server.access_key,
               GPUFAIR_S3_SECRET_KEY=s3_server.secret_key, GPUFAIR_CACHE_DIR=str(work / "cache"), GPUFAIR_CACHE_CAPACITY="8MiB",
               GPUFAIR_NODE="fuzz")
    children, out = [], {}
    try:
        for name in ("metrics", "scheduler", "cache"):
            child, port = start_service(f"gpufair.{name}", env, Path(work / f"{name}.log"))
            children.append(child)
            out[name] = f"127.0.0.1:{port}"
            if name == "metrics":
                env["GPUFAIR_METRICS_ADDR"] = out[name]
        yield out
    finally:
        for child in reversed(children):
            child.stop()


def _call(channel: grpc.Channel, service: str, method: MethodDescriptor, request: Message) -> None:
    path = f"/{method.containing_service.full_name}/{method.name}"
    kw = dict(request_serializer=lambda m: m.SerializeToString(), response_deserializer=lambda b: b)
    if method.client_streaming and method.server_streaming:
        call = channel.stream_stream(path, **kw)(iter([request, request]), timeout=STREAM_DEADLINE_S * 2)
        for _ in call:
            pass  # the service answers each batch and ends when the client's stream does
    elif method.server_streaming:
        call = channel.unary_stream(path, **kw)(request, timeout=STREAM_DEADLINE_S)
        try:
            for i, _ in enumerate(call):
                if i >= 1:
                    break
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
        finally:
            call.cancel()
    else:
        channel.unary_unary(path, **kw)(request, timeout=UNARY_DEADLINE_S)


def _healthy(addr: str) -> bool:
    with grpc.insecure_channel(addr) as ch:
        return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize(("service", "method"), METHODS, ids=[f"{s}.{m.name}" for s, m in METHODS])
def test_hostile_requests_get_clear_statuses(addrs: dict[str, str], service: str, method: MethodDescriptor) -> None:
    channel = grpc.insecure_channel(addrs[service], options=[("grpc.max_send_message_length", 16 * 1024 * 1024)])

    @settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(request=messages(method.input_type))
    def check(request: Message) -> None:
        try:
            _call(channel, service, method, request)
        except grpc.RpcError as exc:
            assert exc.code() in CLEAR, f"{service}.{method.name} answered {exc.code().name}: {exc.details()} for {str(request)[:500]!r}"

    try:
        check()
    finally:
        channel.close()
    assert _healthy(addrs[service]), f"{service} is not SERVING after the fuzzing"
