"""The views users reach for, against live services: `gpufair devices` (who holds whom
back), `gpufair pipeline submit/ls/get` (with --param), `gpufair job rm` and `jobs` vs
`jobs --all`, and `status` saying an S3 endpoint that answers is reachable."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc

from gpufair.api.metrics.v1 import metrics_service_pb2 as mpb
from gpufair.api.metrics.v1 import metrics_service_pb2_grpc as mpb_grpc
from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from gpufair.cache.app import start_node
from gpufair.cache.node.config import NodeCacheConfig
from gpufair.common.config import CommonConfig
from gpufair.metrics.app import start as start_metrics
from gpufair.scheduler.app import start_replica
from gpufair.scheduler.sources import PolicySettings

PIPELINE = Path(__file__).resolve().parents[2] / "examples" / "pipelines" / "demo-train.yaml"


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpufair.client.cli", *args], env=env, capture_output=True, text=True, timeout=60)


def _report(job: str, rank: int, device: str, per_sample_s: float, steps: int = 20) -> mpb.ReportTelemetryRequest:
    t0 = time.time() - steps * 0.1
    return mpb.ReportTelemetryRequest(
        job_id=job, rank=rank, node="n1", device_id=device, global_batch=64, total_samples=64_000, batch_seq=1,
        records=[mpb.StepRecord(step=s, local_batch=32, compute_s=per_sample_s * 32, samples_total=(s + 1) * 32, steps_total=s + 1,
                                unix_time_s=t0 + s * 0.1) for s in range(steps)])


async def test_devices_pipelines_and_job_removal_from_the_cli(tmp_path: Path, etcd_endpoint: str, etcd_root: str, s3_server,
                                                              s3_client) -> None:
    bucket = f"views-{uuid.uuid4().hex[:8]}"
    s3_client.make_bucket(bucket)
    s3_client.put_object(bucket, "images/a.bin", io.BytesIO(b"x" * 1000), 1000)
    metrics, _ = await start_metrics(CommonConfig(listen="127.0.0.1:0"))
    common = CommonConfig(listen="127.0.0.1:0", etcd=etcd_endpoint, etcd_root=etcd_root, metrics_addr=f"127.0.0.1:{metrics.port}")
    sched = await start_replica(common, PolicySettings("even", 1.0, 0.05))
    cache = await start_node(common, NodeCacheConfig(cache_dir=tmp_path / "cache", capacity_bytes=1 << 20, node="n1",
                                                      s3_endpoint=s3_server.endpoint, s3_access_key=s3_server.access_key,
                                                      s3_secret_key=s3_server.secret_key))
    env = dict(os.environ, GPUFAIR_SCHEDULER_ADDR=f"127.0.0.1:{sched.server.port}", GPUFAIR_METRICS_ADDR=f"127.0.0.1:{metrics.port}",
               GPUFAIR_CACHE_ADDR=f"127.0.0.1:{cache.server.port}", GPUFAIR_S3_ENDPOINT=s3_server.endpoint)
    run = lambda *a: asyncio.to_thread(_cli, env, *a)  # noqa: E731
    try:
        # Job "slow" has rank 1 on the shared GPU "g-shared" at 3x the cost of its rank 0: that GPU holds it back.
        async with grpc.aio.insecure_channel(f"127.0.0.1:{metrics.port}") as ch:
            async def reports():
                yield _report("slow", 0, "g-own", 0.001)
                yield _report("slow", 1, "g-shared", 0.003)
                yield _report("fine", 0, "g-shared", 0.001)
            async for _ in mpb_grpc.MetricsServiceStub(ch).ReportTelemetry(reports()):
                pass
        shown = json.loads((await run("devices", "--json")).stdout)
        shared = next(d for d in shown if d["device_id"] == "g-shared")
        assert {(o["job_id"], o["holds_back"]) for o in shared["occupants"]} == {("slow", True), ("fine", False)}
        assert not any(o["holds_back"] for d in shown if d["device_id"] == "g-own" for o in d["occupants"])
        table = (await run("devices")).stdout
        assert "g-shared" in table and "HOLDS BACK" in table and "slow[1]" in table

        submitted = await run("pipeline", "submit", str(PIPELINE), "--param", f"dataset=s3://{bucket}/images/", "--run-id",
                              "views-run", "--json")
        assert submitted.returncode == 0, submitted.stderr
        plan = json.loads(submitted.stdout)["plan"]
        assert [d["uri"] for d in plan["datasets"]] == [f"s3://{bucket}/images/"]  # --param replaced the default dataset
        listed = json.loads((await run("pipeline", "ls", "--json")).stdout)
        assert [(r["run_id"], r["datasets"]) for r in listed] == [("views-run", 1)]
        got = await run("pipeline", "get", "views-run")
        assert got.returncode == 0 and f"s3://{bucket}/images/" in got.stdout and "train-a" in got.stdout
        assert (await run("pipeline", "get", "no-such-run")).returncode == 2
        assert (await run("pipeline", "submit", str(PIPELINE), "--param", "novalue")).returncode == 2

        async with grpc.aio.insecure_channel(f"127.0.0.1:{sched.server.port}") as ch:
            spec = pb.JobSpec(job_id="gone", model="m", global_batch=64, total_samples=6400,
                              ranks=[pb.RankPlacement(rank=i, node="n1", device_id=f"g{i}") for i in range(2)])
            await pb_grpc.SchedulerServiceStub(ch).RegisterJob(pb.RegisterJobRequest(spec=spec))
        removed = await run("job", "rm", "gone")
        assert removed.returncode == 0 and "ended as removed" in removed.stdout, removed.stderr
        assert "no active jobs" in (await run("jobs")).stdout
        assert "removed" in (await run("jobs", "--all")).stdout
        purged = await run("job", "rm", "gone")
        assert purged.returncode == 0 and "record purged" in purged.stdout
        assert (await run("jobs", "--all")).stdout.strip() == "no jobs"
        assert (await run("job", "rm", "gone")).returncode == 2  # NOT_FOUND now

        status = await run("status", "--json")
        s3 = next(c for c in json.loads(status.stdout)["components"] if c["component"] == "s3")
        assert s3["ok"] and s3["detail"] == "reachable" and "HTTP" not in s3["detail"]
    finally:
        await cache.close()
        await sched.close()
        await metrics.stop(0)
