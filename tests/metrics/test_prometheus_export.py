"""`python -m gpufair.metrics` with GPUFAIR_PROMETHEUS_PORT serves per-job gauges that follow the telemetry."""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpufair.api.metrics.v1 import metrics_service_pb2 as pb
from gpufair.api.metrics.v1 import metrics_service_pb2_grpc as pb_grpc
from gpufair.local import ChildProcess, free_port
from gpufair.local.stack import start_service

pytestmark = pytest.mark.timeout(90)

JOB, GLOBAL_BATCH, TOTAL, STEPS, STEP_S, WAIT_S = "prom-job", 64, 6400, 40, 0.05, 0.005


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[ChildProcess, int, int]]:
    """The metrics service as a child process: (handle, gRPC port, Prometheus port)."""
    prom = free_port()
    env = dict(os.environ, GPUFAIR_LISTEN="127.0.0.1:0", GPUFAIR_PROMETHEUS_PORT=str(prom), GPUFAIR_LOG_LEVEL="WARNING")
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    child, port = start_service("gpufair.metrics", env, tmp_path / "metrics.log")
    yield child, port, prom
    child.stop()


def _telemetry(rank: int, t0: float, first: int = 0) -> pb.ReportTelemetryRequest:
    # Two ranks of 32 samples, one step every STEP_S, of which WAIT_S waiting for data.
    records = [pb.StepRecord(step=s, local_batch=32, compute_s=STEP_S - WAIT_S, data_wait_s=WAIT_S, samples_total=(s + 1) * 32,
                             steps_total=s + 1, unix_time_s=t0 + (s + 1) * STEP_S) for s in range(first, first + STEPS)]
    return pb.ReportTelemetryRequest(job_id=JOB, rank=rank, node="n1", device_id=f"dev-{rank}", global_batch=GLOBAL_BATCH,
                                     total_samples=TOTAL, records=records, batch_seq=1)


def _scrape(port: int) -> dict[str, dict[str, float]]:
    """{metric name: {job label: value}} of the per-job gauges on the scrape page."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as res:
            text = res.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return {}
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "job" in sample.labels:
                out.setdefault(sample.name, {})[sample.labels["job"]] = sample.value
    return out


def _poll_until(port: int, child: ChildProcess, ready: Callable[[dict[str, dict[str, float]]], bool], timeout: float = 30.0) -> dict[str, dict[str, float]]:
    deadline = time.monotonic() + timeout
    while True:
        seen = _scrape(port)
        if ready(seen):
            return seen
        assert child.alive(), child.log_tail()
        assert time.monotonic() < deadline, f"scrape never got there; last: {seen}\n{child.log_tail()}"
        time.sleep(0.1)


def _poll(port: int, child: ChildProcess) -> dict[str, dict[str, float]]:
    """The first scrape that shows both per-job gauges of JOB."""
    return _poll_until(port, child, lambda s: all(JOB in s.get(m, {}) for m in ("gpufair_job_progress_ratio", "gpufair_job_samples_per_second")))


def test_scrape_endpoint_serves_per_job_rate_progress_and_stall(service: tuple[ChildProcess, int, int]) -> None:
    child, port, prom = service
    t0 = time.time() - STEPS * STEP_S  # recent, so the service's expiry keeps it
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        acks = list(pb_grpc.MetricsServiceStub(ch).ReportTelemetry(iter([_telemetry(0, t0), _telemetry(1, t0)]), timeout=10))
    assert [a.accepted for a in acks] == [STEPS, STEPS] and not any(a.rejected for a in acks)

    seen = _poll(prom, child)
    # Each rank moves 32 samples every STEP_S; progress is steps x global batch over the total.
    assert seen["gpufair_job_samples_per_second"][JOB] == pytest.approx(2 * 32 / STEP_S, rel=1e-6)
    assert seen["gpufair_job_progress_ratio"][JOB] == pytest.approx(STEPS * GLOBAL_BATCH / TOTAL, rel=1e-6)
    assert seen["gpufair_job_data_stall_ratio"][JOB] == pytest.approx(WAIT_S / STEP_S, rel=1e-3)


def test_scrape_follows_new_progress_and_a_second_job(service: tuple[ChildProcess, int, int]) -> None:
    child, port, prom = service
    t0 = time.time() - 2 * STEPS * STEP_S
    other = pb.ReportTelemetryRequest(job_id="prom-other", rank=0, global_batch=32, total_samples=320,
                                      records=[pb.StepRecord(step=0, local_batch=32, compute_s=0.01, samples_total=32, steps_total=1,
                                                             unix_time_s=t0)])
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = pb_grpc.MetricsServiceStub(ch)
        list(stub.ReportTelemetry(iter([_telemetry(0, t0), _telemetry(1, t0)]), timeout=10))
        first = _poll(prom, child)["gpufair_job_progress_ratio"][JOB]
        list(stub.ReportTelemetry(iter([_telemetry(0, t0, STEPS), _telemetry(1, t0, STEPS), other]), timeout=10))

    seen = _poll_until(prom, child, lambda s: "prom-other" in s.get("gpufair_job_progress_ratio", {}))
    assert first == pytest.approx(STEPS * GLOBAL_BATCH / TOTAL)
    assert seen["gpufair_job_progress_ratio"][JOB] == pytest.approx(2 * first)
    assert seen["gpufair_job_progress_ratio"]["prom-other"] == pytest.approx(32 / 320)
    assert seen["gpufair_job_samples_per_second"][JOB] == pytest.approx(2 * 32 / STEP_S, rel=1e-6)
