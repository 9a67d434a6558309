"""Metrics ingest microbenchmark: records/s one metrics service process sustains from many concurrent streams.

    .venv/bin/python bench/load/ingest_bench.py --streams 64 --seconds 10

Runs twice in the same process tree: batches of 256 records per message (what
the client sends) and the baseline of one record per message. The service is
pinned to one core (taskset) when possible; requests are serialized up front,
so the load generators measure the service, not protobuf building.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import grpc

from gpufair.api.metrics.v1 import metrics_service_pb2 as pb
from gpufair.local.procs import ChildProcess
from gpufair.local.stack import start_service

METHOD = "/gpufair.metrics.v1.MetricsService/ReportTelemetry"


def _payloads(stream: int, batch: int, n_msgs: int) -> list[bytes]:
    out, step = [], 0
    for seq in range(n_msgs):
        records = []
        for _ in range(batch):
            step += 1
            records.append(pb.StepRecord(step=step, local_batch=32, compute_s=0.01, data_wait_s=0.001, samples_total=step * 32,
                                         steps_total=step, unix_time_s=1.7e9 + step * 0.01))
        out.append(pb.ReportTelemetryRequest(job_id=f"bench-{stream % 16}", rank=stream, node="n", device_id=f"d{stream}", global_batch=512,
                                             total_samples=10**12, records=records, batch_seq=seq + 1).SerializeToString())
    return out


def drive(addr: str, streams: list[int], batch: int, seconds: float) -> int:
    """One load-generator process: its streams send pre-serialized batches as fast as acks come back; returns records accepted."""
    n_msgs = max(4, 1_000_000 // batch // max(len(streams), 1))
    payloads = {s: _payloads(s, batch, n_msgs) for s in streams}

    async def one(channel: grpc.aio.Channel, s: int, until: float) -> int:
        call = channel.stream_stream(METHOD, request_serializer=lambda b: b, response_deserializer=pb.ReportTelemetryResponse.FromString)
        accepted = 0

        async def requests():  # type: ignore[no-untyped-def]
            for p in payloads[s]:
                if time.monotonic() > until:
                    return
                yield p

        async for ack in call(requests()):
            accepted += ack.accepted
        return accepted

    async def main() -> int:
        until = time.monotonic() + seconds
        async with grpc.aio.insecure_channel(addr) as ch:
            return sum(await asyncio.gather(*(one(ch, s, until) for s in streams)))

    return asyncio.run(main())


def run(batch: int, streams: int, seconds: float, procs: int, workdir: Path) -> float:
    env = dict(os.environ, GPUFAIR_LISTEN="127.0.0.1:0", GPUFAIR_LOG_LEVEL="WARNING")
    child, port = start_service("gpufair.metrics", env, workdir / f"metrics-{batch}.log")
    _pin(child, 0)
    try:
        t0 = time.monotonic()
        with ProcessPoolExecutor(procs) as pool:
            total = sum(pool.map(drive, [f"127.0.0.1:{port}"] * procs, [list(range(i, streams, procs)) for i in range(procs)],
                                 [batch] * procs, [seconds] * procs))
        return total / (time.monotonic() - t0)
    finally:
        child.stop()


def _pin(child: ChildProcess, cpu: int) -> None:
    if hasattr(os, "sched_setaffinity") and shutil.which("taskset") is not None and os.cpu_count() and os.cpu_count() > 1:
        os.sched_setaffinity(child.proc.pid, {cpu})


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--streams", type=int, default=64)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--procs", type=int, default=1, help="load-generator processes")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpufair-ingest-"))
    batched = run(256, args.streams, args.seconds, args.procs, work)
    single = run(1, args.streams, args.seconds, args.procs, work)
    print(json.dumps({"streams": args.streams, "records_per_s_batched_256": round(batched), "records_per_s_one_per_message": round(single),
                      "ratio": round(batched / single, 1) if single else None, "target_met": batched >= 100_000}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
