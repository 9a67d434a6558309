"""Errors are bounded and bad bytes are the caller's fault, against real service processes:
a 20,000-character id gets a short INVALID_ARGUMENT (not RESOURCE_EXHAUSTED), undecodable
request bytes get INVALID_ARGUMENT (not UNKNOWN), anonymously too, and the service logs one
WARNING line for a burst of them, never a traceback; the CLI prints one line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from gpufair.common.errors import MAX_ECHO, bounded
from gpufair.local import ChildProcess
from gpufair.local.stack import start_service

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def services(etcd_endpoint: str, tmp_path: Path) -> Iterator[dict[str, tuple[str, ChildProcess]]]:
    env = dict(os.environ, GPUFAIR_ETCD=etcd_endpoint, GPUFAIR_ETCD_ROOT=f"/bounded-{uuid.uuid4().hex[:8]}", GPUFAIR_LISTEN="127.0.0.1:0",
               GPUFAIR_LOG_LEVEL="INFO", GPUFAIR_LEASE_TTL="3")
    out: dict[str, tuple[str, ChildProcess]] = {}
    try:
        for name in ("metrics", "scheduler"):
            child, port = start_service(f"gpufair.{name}", env, tmp_path / f"{name}.log")
            out[name] = (f"127.0.0.1:{port}", child)
            env["GPUFAIR_METRICS_ADDR"] = out[name][0]
        yield out
    finally:
        for _, child in out.values():
            child.stop()


def test_bounded_cuts_each_long_echo_and_the_whole_message() -> None:
    message = bounded(f"job_id {'a' * 20_000!r} is not a valid id; uri s3://{'b' * 500} too")
    assert "(20000 characters)" in message and "(505 characters)" in message and len(message) < 400
    assert bounded("job 'short' is fine") == "job 'short' is fine"
    assert len(bounded("word " * 5000)) < 1100 and "message cut" in bounded("word " * 5000)
    assert len(bounded(repr("x" * 10_000))) <= MAX_ECHO + 40


def test_a_huge_id_gets_a_short_invalid_argument(services) -> None:
    addr, _ = services["scheduler"]
    with grpc.insecure_channel(addr) as ch:
        stub = pb_grpc.SchedulerServiceStub(ch)
        with pytest.raises(grpc.RpcError) as err:
            stub.GetJob(pb.GetJobRequest(job_id="a" * 20_000), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert len(err.value.details()) < 300 and "20000 characters" in err.value.details()


def test_garbage_bytes_are_invalid_argument_with_one_warning_and_no_traceback(services) -> None:
    garbage = b"\xff\xff\xff\xff\x0f"
    for name, method in (("scheduler", "/gpufair.scheduler.v1.SchedulerService/ListJobs"),
                         ("metrics", "/gpufair.metrics.v1.MetricsService/ListJobStats")):
        addr, child = services[name]
        with grpc.insecure_channel(addr) as ch:
            call = ch.unary_unary(method)  # raw bytes, no serializer: what a hostile client sends
            for _ in range(20):
                with pytest.raises(grpc.RpcError) as err:
                    call(garbage, timeout=10)
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
                assert "is not a valid" in err.value.details() and "DecodeError" not in err.value.details()
        log = ""
        deadline = time.monotonic() + 5
        while "is not a valid" not in log and time.monotonic() < deadline:
            log = child.log_tail(100_000)
            time.sleep(0.05)
        assert "Traceback" not in log and " ERROR " not in log, log[-2000:]
        assert log.count("WARNING gpufair.common.interceptors") == 1, log[-2000:]  # 20 mistakes, one line


def test_garbage_in_a_request_stream_is_invalid_argument(services) -> None:
    addr, child = services["metrics"]
    with grpc.insecure_channel(addr) as ch:
        call = ch.stream_stream("/gpufair.metrics.v1.MetricsService/ReportTelemetry")  # raw bytes, as a hostile client
        with pytest.raises(grpc.RpcError) as err:
            list(call(iter([b"\xff\xff\xff\xff\x0f"]), timeout=10))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "ReportTelemetryRequest" in err.value.details()
    assert "Traceback" not in child.log_tail(100_000)


def test_the_cli_prints_one_line_for_a_huge_id(services) -> None:
    addr, _ = services["scheduler"]
    env = dict(os.environ, GPUFAIR_SCHEDULER_ADDR=addr)
    done = subprocess.run([sys.executable, "-m", "gpufair.client.cli", "job", "b" * 20_000], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and len(done.stderr) < 400, done.stderr[:500]
