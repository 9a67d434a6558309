"""An epoch of a 2-rank training job reading from S3 directly vs from a cache the planner filled first.

    .venv/bin/python bench/cache/bench_epoch.py [--shards 64] [--per-shard 256] [--global-batch 64]
        [--link-mbps 40] [--conn-mbps 20] [--rtt-ms 10] [--min-step-ms 50] [--json]

Starts a local stack (etcd, an S3 endpoint, the metrics, scheduler and cache
services) with a throttling proxy between everything and S3, uploads image
shards, then runs the same job twice: "direct" reads each shard from S3 when
first touched; "planned cache" first submits a pipeline naming the dataset to
the cache service (SubmitPipeline, start_prefetch), waits until Resolve says
CACHED, then starts the same job on the local path. The data-wait fraction is
the metrics service's GetJobStats.data_stall_fraction for each job.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import grpc
import numpy as np
from minio import Minio

from gpufair.api.cache.v1 import cache_service_pb2 as cpb
from gpufair.api.cache.v1 import cache_service_pb2_grpc as cpb_grpc
from gpufair.api.metrics.v1 import metrics_service_pb2 as mpb
from gpufair.api.metrics.v1 import metrics_service_pb2_grpc as mpb_grpc
from gpufair.api.scheduler.v1 import scheduler_service_pb2 as spb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as spb_grpc
from gpufair.local import S3Server
from gpufair.local.launch import launch
from gpufair.local.stack import LocalStack

sys.path.insert(0, str(Path(__file__).parent))
from throttle import ThrottleProxyProcess  # noqa: E402

BUCKET, PREFIX = "bench-epoch", "shards/"
URI = f"s3://{BUCKET}/{PREFIX}"
TRAINER = Path(__file__).with_name("epoch_trainer.py")
METRICS_WINDOW_S = 30.0  # MetricsStore's default window: an epoch longer than this is only partly covered

PIPELINE = """\
# A Kubeflow (Argo) pipeline: a preparation step, then a 2-GPU training step reading the dataset.
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  generateName: bench-epoch-
spec:
  entrypoint: main
  arguments:
    parameters:
      - name: dataset
        value: {uri}
  templates:
    - name: main
      dag:
        tasks:
          - name: prepare
            template: prepare
          - name: train
            template: train
            dependencies: [prepare]
            arguments:
              parameters: [{{name: data, value: "{{{{workflow.parameters.dataset}}}}"}}]
    - name: prepare
      container:
        image: python:3.11-slim
        command: [python, -c, "print('preparing')"]
    - name: train
      inputs:
        parameters: [{{name: data}}]
      container:
        image: gpufair/trainer:0.1.0
        command: [torchrun, --nproc-per-node, "2", bench/cache/epoch_trainer.py]
        args: ["--data", "{{{{inputs.parameters.data}}}}"]
        resources:
          limits: {{nvidia.com/gpu: 2}}
"""


@dataclass(frozen=True)
class EpochResult:
    """One run of the job: wall time, the metrics service's stall fractions, the ranks' own totals."""

    label: str
    epoch_s: float
    steps: int
    stall: float  # GetJobStats.data_stall_fraction
    rank_stall: tuple[float, ...]
    own_stall: float  # every step's data wait (the first too) over the epoch, from the ranks
    open_s: float  # dataset open before the step (resolve + manifest)
    loss: float


def upload(client: Minio, shards: int, per_shard: int, seed: int = 0) -> int:
    """Image shards (3x32x32 uint8, labels a fixed linear function of pixels) plus a manifest."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((3 * 32 * 32, 10)).astype(np.float32)
    client.make_bucket(BUCKET)

    def put(i: int) -> int:
        x = np.random.default_rng(seed + 1 + i).integers(0, 256, size=(per_shard, 3, 32, 32), dtype=np.uint8)
        y = ((x.reshape(per_shard, -1).astype(np.float32) / 255.0 - 0.5) @ w).argmax(axis=1).astype(np.int64)
        buf = io.BytesIO()
        np.savez(buf, x=x, y=y)
        data = buf.getvalue()
        client.put_object(BUCKET, f"{PREFIX}shard-{i:04d}.npz", io.BytesIO(data), len(data))
        return len(data)

    with ThreadPoolExecutor(4) as pool:
        total = sum(pool.map(put, range(shards)))
    manifest = json.dumps({"shards": [{"name": f"shard-{i:04d}.npz", "samples": per_shard} for i in range(shards)]}).encode()
    client.put_object(BUCKET, f"{PREFIX}manifest.json", io.BytesIO(manifest), len(manifest))
    return total + len(manifest)


def job_stats(env: dict[str, str], job: str, steps: int, timeout: float = 15.0) -> mpb.JobStats:
    """The job's stats once every rank's records for all `steps` have arrived."""
    with grpc.insecure_channel(env["GPUFAIR_METRICS_ADDR"]) as ch:
        stub = mpb_grpc.MetricsServiceStub(ch)
        deadline = time.monotonic() + timeout
        while True:
            try:
                stats = stub.GetJobStats(mpb.GetJobStatsRequest(job_id=job), timeout=5).stats
                if stats.steps_done >= steps:
                    return stats
                if time.monotonic() > deadline:
                    print(f"note: metrics have {stats.steps_done} of {steps} steps of {job}", file=sys.stderr)
                    return stats
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.NOT_FOUND or time.monotonic() > deadline:
                    raise
            time.sleep(0.2)


def run_job(env: dict[str, str], work: Path, label: str, mode: str, args: argparse.Namespace) -> EpochResult:
    """Launch the 2-rank job, wait for it, and read the metrics service's view of it."""
    job = f"epoch-{mode}-{int(time.time())}"
    stats_out = work / job
    local = launch(job, [str(TRAINER), "--job", job, "--mode", mode, "--uri", URI, "--global-batch", str(args.global_batch),
                         "--min-step-ms", str(args.min_step_ms), "--stats-out", str(stats_out)], 2, work / "logs", env)
    try:
        codes = local.wait(timeout=300)
    finally:
        local.kill()
    if any(codes):
        raise RuntimeError(f"{job} failed (exit codes {codes}):\n{local.logs()}")
    ranks = [json.loads(Path(f"{stats_out}.rank{r}.json").read_text()) for r in range(2)]
    epoch_s = max(r["end"] for r in ranks) - min(r["start"] for r in ranks)
    steps = min(r["steps"] for r in ranks)
    stats = job_stats(env, job, steps)
    own = sum(r["data_wait_s"] for r in ranks) / sum(r["end"] - r["start"] for r in ranks)
    return EpochResult(label, epoch_s, steps, stats.data_stall_fraction, tuple(r.data_stall_fraction for r in stats.ranks),
                       own, max(r["open_s"] for r in ranks), ranks[0]["loss"])


def planned_prefetch(env: dict[str, str]) -> tuple[float, cpb.Plan]:
    """Submit the pipeline with start_prefetch and wait until the planner's prefetch has the dataset CACHED."""
    with grpc.insecure_channel(env["GPUFAIR_CACHE_ADDR"]) as ch:
        stub = cpb_grpc.CacheServiceStub(ch)
        t0 = time.perf_counter()
        plan = stub.SubmitPipeline(cpb.SubmitPipelineRequest(yaml=PIPELINE.format(uri=URI), source="bench-epoch.yaml",
                                                             run_id=f"bench-epoch-{int(time.time())}", start_prefetch=True),
                                   timeout=30).plan
        deadline = time.monotonic() + 120
        while True:  # fetch=False: only the planner's prefetch may fill the cache
            entry = stub.Resolve(cpb.ResolveRequest(uri=URI, fetch=False, wait_s=0), timeout=10).entry
            if entry.state == cpb.ENTRY_STATE_CACHED:
                return time.perf_counter() - t0, plan
            if entry.state == cpb.ENTRY_STATE_FAILED or time.monotonic() > deadline:
                raise RuntimeError(f"planned prefetch of {URI} did not complete: state {entry.state} {entry.error}")
            time.sleep(0.02)


def print_report(args: argparse.Namespace, nbytes: int, direct: EpochResult, cached: EpochResult, prefetch_s: float,
                 plan: cpb.Plan) -> None:
    ds = next(d for d in plan.datasets if d.uri == URI)
    train = next(s for s in plan.steps if s.name == "train")
    print(f"dataset {args.shards} shards x {args.per_shard} images, {nbytes / 2**20:.1f} MiB; 2 ranks, global batch "
          f"{args.global_batch}, {direct.steps} steps; link {args.link_mbps} MB/s shared, {args.conn_mbps} MB/s per "
          f"connection, RTT {args.rtt_ms} ms")
    print(f"plan: train predicted at +{train.predicted_start_s:.0f} s, prefetch of {URI} starts at "
          f"+{ds.prefetch_start_s:.0f} s (size {ds.size_bytes / 2**20:.1f} MiB); prefetch took {prefetch_s:.2f} s "
          f"({nbytes / prefetch_s / 1e6:.1f} MB/s), all before the step")
    print(f"{'run':<14} {'epoch (s)':>9} {'stall (metrics)':>15} {'rank 0':>7} {'rank 1':>7} {'stall (ranks)':>13} "
          f"{'open (s)':>8} {'loss':>6}")
    for r in (direct, cached):
        ranks = " ".join(f"{s:>7.1%}" for s in r.rank_stall)
        print(f"{r.label:<14} {r.epoch_s:>9.2f} {r.stall:>15.1%} {ranks} {r.own_stall:>13.1%} {r.open_s:>8.2f} {r.loss:>6.3f}")
    print(f"epoch speed-up {direct.epoch_s / cached.epoch_s:.2f}x; data-wait fraction {direct.stall:.1%} -> "
          f"{cached.stall:.1%} ({direct.stall / max(cached.stall, 1e-9):.1f}x less); prefetch + epoch "
          f"{prefetch_s + cached.epoch_s:.2f} s vs direct epoch {direct.epoch_s:.2f} s")
    if max(direct.epoch_s, cached.epoch_s) > METRICS_WINDOW_S:
        print(f"note: an epoch ran longer than the metrics window ({METRICS_WINDOW_S:.0f} s); its stall covers the last part only")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--per-shard", type=int, default=256, help="3x32x32 images per shard (256 = 0.75 MiB)")
    ap.add_argument("--global-batch", type=int, default=64)
    ap.add_argument("--link-mbps", type=float, default=40.0, help="shared link, MB/s")
    ap.add_argument("--conn-mbps", type=float, default=20.0, help="per TCP connection, MB/s")
    ap.add_argument("--rtt-ms", type=float, default=10.0)
    ap.add_argument("--min-step-ms", type=float, default=50.0,
                    help="pad each step's compute to at least this (a modelled accelerator step; 0: CPU only)")
    ap.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = ap.parse_args()
    if args.shards < 1 or args.per_shard < 1 or args.global_batch < 2 or args.shards * args.per_shard < args.global_batch:
        print("error: need --shards, --per-shard >= 1 and a dataset of at least one global batch (>= 2)", file=sys.stderr)
        return 2

    work = Path(tempfile.mkdtemp(prefix="gpufair-bench-epoch-"))
    server = S3Server(workdir=work / "s3").start()
    proxy: ThrottleProxyProcess | None = None
    stack: LocalStack | None = None
    try:
        nbytes = upload(Minio(server.endpoint, access_key=server.access_key, secret_key=server.secret_key, secure=False),
                        args.shards, args.per_shard)
        proxy = ThrottleProxyProcess(server.endpoint, args.link_mbps * 1e6, args.conn_mbps * 1e6, args.rtt_ms / 1000)
        base = dict(os.environ, GPUFAIR_S3_ENDPOINT=proxy.endpoint, GPUFAIR_S3_ACCESS_KEY=server.access_key,
                    GPUFAIR_S3_SECRET_KEY=server.secret_key)
        stack = LocalStack(workdir=work / "stack").start(base)
        with grpc.insecure_channel(stack.env["GPUFAIR_SCHEDULER_ADDR"]) as ch:  # fixed even split in both runs
            spb_grpc.SchedulerServiceStub(ch).SetPolicy(spb.SetPolicyRequest(policy=spb.PolicyConfig(name="even", period_s=1.0)), timeout=10)
        direct = run_job(stack.env, work, "direct (S3)", "direct", args)
        prefetch_s, plan = planned_prefetch(stack.env)
        cached = run_job(stack.env, work, "planned cache", "cache", args)
        print_report(args, nbytes, direct, cached, prefetch_s, plan)
        if args.json:
            print(json.dumps({"bytes": nbytes, "prefetch_s": prefetch_s, "direct": asdict(direct), "cache": asdict(cached)}))
    finally:
        if stack:
            stack.stop()
        if proxy:
            proxy.stop()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
