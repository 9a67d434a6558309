"""A real Prometheus (Debian's `prometheus`, on a free port) scrapes the three services
while they work; every metric the shipped Grafana dashboard queries then exists in it,
and every query of the dashboard is valid PromQL there."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from deploy_support import DEPLOY
from gpufair.api.cache.v1 import cache_service_pb2 as cpb
from gpufair.api.cache.v1 import cache_service_pb2_grpc as cpb_grpc
from gpufair.api.metrics.v1 import metrics_service_pb2 as mpb
from gpufair.api.metrics.v1 import metrics_service_pb2_grpc as mpb_grpc
from gpufair.api.scheduler.v1 import scheduler_service_pb2 as spb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as spb_grpc
from gpufair.local import ChildProcess, free_port
from gpufair.local.procs import with_parent_death
from gpufair.local.stack import start_service

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

DASHBOARD = DEPLOY / "grafana" / "gpufair-dashboard.json"
PROMETHEUS = shutil.which("prometheus")


def _exprs() -> list[str]:
    return [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p.get("targets", [])]


def _api(port: int, path: str, **params: str) -> dict:
    url = f"http://127.0.0.1:{port}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    with urllib.request.urlopen(url, timeout=5) as res:
        return json.loads(res.read())


@pytest.fixture
def services(etcd_endpoint: str, s3_server, tmp_path: Path) -> Iterator[dict[str, tuple[str, int]]]:
    """metrics, scheduler and cache as processes, each with its Prometheus port: name -> (gRPC address, scrape port)."""
    env = dict(os.environ, GPUFAIR_ETCD=etcd_endpoint, GPUFAIR_ETCD_ROOT=f"/prom-{uuid.uuid4().hex[:8]}", GPUFAIR_LEASE_TTL="3",
               GPUFAIR_PERIOD_S="0.3", GPUFAIR_LOG_LEVEL="WARNING", GPUFAIR_PRESET="gpufair", GPUFAIR_S3_ENDPOINT=s3_server.endpoint,
               GPUFAIR_S3_ACCESS_KEY=s3_server.access_key, GPUFAIR_S3_SECRET_KEY=s3_server.secret_key,
               GPUFAIR_CACHE_DIR=str(tmp_path / "cache"), GPUFAIR_CACHE_CAPACITY="1MiB", GPUFAIR_NODE="prom-node")
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    children: list[ChildProcess] = []
    out: dict[str, tuple[str, int]] = {}
    try:
        for name in ("metrics", "scheduler", "cache"):
            prom = free_port()
            child, port = start_service(f"gpufair.{name}", dict(env, GPUFAIR_LISTEN="127.0.0.1:0", GPUFAIR_PROMETHEUS_PORT=str(prom)),
                                        tmp_path / f"{name}.log")
            children.append(child)
            out[name] = (f"127.0.0.1:{port}", prom)
            if name == "metrics":
                env["GPUFAIR_METRICS_ADDR"] = out[name][0]
        yield out
    finally:
        for child in reversed(children):
            child.stop()


@pytest.fixture
def prometheus(services: dict[str, tuple[str, int]], tmp_path: Path) -> Iterator[int]:
    """A real Prometheus scraping the services every second (honor_labels, as the ServiceMonitor); yields its port."""
    if PROMETHEUS is None:
        pytest.skip("prometheus is not installed: `make setup` installs Debian's prometheus package")
    port = free_port()
    targets = [f"127.0.0.1:{prom}" for _, prom in services.values()]
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                                  "scrape_configs": [{"job_name": "gpufair", "honor_labels": True,
                                                      "static_configs": [{"targets": targets}]}]}))
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen(with_parent_death([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                               f"--web.listen-address=127.0.0.1:{port}"]), stdout=log, stderr=subprocess.STDOUT)
    log.close()
    child = ChildProcess(proc, tmp_path / "prometheus.log")
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2)
                break
            except OSError:
                assert child.alive() and time.monotonic() < deadline, f"prometheus did not start:\n{child.log_tail()}"
                time.sleep(0.2)
        yield port
    finally:
        child.stop()


def _activity(services: dict[str, tuple[str, int]], s3_client) -> None:
    """What a working cluster does: telemetry, registered jobs with live ranks (one held), a
    submission placed, a fetch and an eviction."""
    t0 = time.time() - 5
    with grpc.insecure_channel(services["metrics"][0]) as ch:
        reqs = [mpb.ReportTelemetryRequest(job_id="prom-job", rank=r, node="n", device_id=f"g{r}", global_batch=64,
                                           total_samples=64_000, batch_seq=1,
                                           records=[mpb.StepRecord(step=s, local_batch=32, compute_s=0.02, data_wait_s=0.001,
                                                                   samples_total=(s + 1) * 32, steps_total=s + 1,
                                                                   unix_time_s=t0 + s * 0.1) for s in range(40)])
                for r in range(2)]
        # prom-held has stepped too: a job still starting is not held, it gets no time yet.
        reqs.append(mpb.ReportTelemetryRequest(job_id="prom-held", rank=0, node="n", device_id="g0", global_batch=8,
                                               total_samples=10**9, batch_seq=1,
                                               records=[mpb.StepRecord(step=0, local_batch=8, compute_s=0.02, data_wait_s=0.001,
                                                                       samples_total=8, steps_total=1, unix_time_s=t0)]))
        list(mpb_grpc.MetricsServiceStub(ch).ReportTelemetry(iter(reqs), timeout=10))
    with grpc.insecure_channel(services["scheduler"][0]) as ch:
        stub = spb_grpc.SchedulerServiceStub(ch)
        spec = spb.JobSpec(job_id="prom-job", model="m", global_batch=64, total_samples=64_000,
                           ranks=[spb.RankPlacement(rank=r, node="n", device_id=f"g{r}") for r in range(2)])
        stub.RegisterJob(spb.RegisterJobRequest(spec=spec), timeout=10)
        # A long job on prom-job's GPU: one of the two is held (a paced share of 0, a
        # queue entry); a submission for a free GPU is placed (an admission wait).
        held = spb.JobSpec(job_id="prom-held", model="m", global_batch=8, total_samples=10**9, exclusive_samples_per_s=1.0,
                           ranks=[spb.RankPlacement(rank=0, node="n", device_id="g0")])
        stub.RegisterJob(spb.RegisterJobRequest(spec=held), timeout=10)
        stub.SubmitJob(spb.SubmitJobRequest(submission=spb.Submission(job_id="prom-sub", num_gpus=1, node="n", devices=["g2"],
                                                                      global_batch=8, total_samples=800)), timeout=10)
        with pytest.raises(grpc.RpcError):
            stub.GetJob(spb.GetJobRequest(job_id="no-such-job"), timeout=10)  # a NOT_FOUND among the statuses
    bucket = f"prom-{uuid.uuid4().hex[:8]}"
    s3_client.make_bucket(bucket)
    s3_client.put_object(bucket, "d.bin", io.BytesIO(b"p" * 10_000), 10_000)
    with grpc.insecure_channel(services["cache"][0]) as ch:
        stub = cpb_grpc.CacheServiceStub(ch)
        assert stub.Resolve(cpb.ResolveRequest(uri=f"s3://{bucket}/d.bin", wait_s=30), timeout=40).entry.state == cpb.ENTRY_STATE_CACHED
        assert stub.EvictEntry(cpb.EvictEntryRequest(uri=f"s3://{bucket}/d.bin"), timeout=10).evicted


def _live_ranks(addr: str) -> Iterator[None]:
    """Both ranks of prom-job follow their command streams (so rounds include it) until closed."""
    ch = grpc.insecure_channel(addr)
    stub = spb_grpc.SchedulerServiceStub(ch)
    calls = [stub.StreamCommands(spb.StreamCommandsRequest(job_id="prom-job", rank=r)) for r in range(2)]
    for c in calls:
        next(c)  # the current split: the stream is open and the rank a live member
    try:
        yield
    finally:
        for c in calls:
            c.cancel()
        ch.close()


def test_every_dashboard_metric_exists_in_a_real_prometheus(services, prometheus: int, s3_client) -> None:
    wanted = {m for e in _exprs() for m in re.findall(r"\bgpufair_[a-z0-9_]+", e)}
    _activity(services, s3_client)
    streams = _live_ranks(services["scheduler"][0])
    next(streams)
    try:
        have: set[str] = set()
        deadline = time.monotonic() + 60
        while not wanted <= have and time.monotonic() < deadline:
            time.sleep(1)
            series = _api(prometheus, "/api/v1/query", query='count by (__name__) ({__name__=~"gpufair_.+"})')["data"]["result"]
            have = {s["metric"]["__name__"] for s in series}
        assert wanted <= have, f"the dashboard queries metrics no service exports: {sorted(wanted - have)}"
        targets = _api(prometheus, "/api/v1/targets")["data"]["activeTargets"]
        assert len(targets) == 3 and all(t["health"] == "up" for t in targets), targets
        for expr in _exprs():
            answer = _api(prometheus, "/api/v1/query", query=expr.replace("$job", ".*"))
            assert answer["status"] == "success", (expr, answer)
    finally:
        next(streams, None)
