"""`python -m gpufair.local` brings a whole stack up, prints how to reach it, and takes it down."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_local_stack_serves_and_stops_on_ctrl_c(tmp_path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "gpufair.local", "--workdir", str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=dict(os.environ, GPUFAIR_S3_ENDPOINT=""))
    exports: dict[str, str] = {}
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            m = re.match(r"export (GPUFAIR_\w+)=(\S+)", line)
            if m:
                exports[m.group(1)] = m.group(2)
            if line.startswith("Ctrl-C"):
                break
        for name in ("GPUFAIR_METRICS_ADDR", "GPUFAIR_SCHEDULER_ADDR", "GPUFAIR_CACHE_ADDR"):
            with grpc.insecure_channel(exports[name]) as ch:
                # Every service of the stack becomes SERVING: its etcd (and S3) answer.
                watch = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest(), wait_for_ready=True, timeout=60)
                assert next(r.status for r in watch if r.status == health_pb2.HealthCheckResponse.SERVING), name
                watch.cancel()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        for name in ("GPUFAIR_METRICS_ADDR", "GPUFAIR_SCHEDULER_ADDR"):
            with grpc.insecure_channel(exports[name]) as ch, pytest.raises(grpc.RpcError):
                health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=2)
    finally:
        if proc.poll() is None:
            proc.kill()
