"""Records per second one metrics service process ingests from many concurrent telemetry streams.

The service runs as a child process (`python -m gpufair.metrics`) pinned to one
core; sender processes, pinned to the other cores, replay pre-serialised
`ReportTelemetryRequest`s (so the senders' protobuf work is done before the
clock starts) over `--streams` concurrent ReportTelemetry streams, and count the
records the service acknowledged as accepted. Batched (`--batch` records per
message) and one-record-per-message runs hit the same service in the same run.

    .venv/bin/python bench/metrics/ingest.py [--streams 50] [--batch 256] [--seconds 5] [--senders 2]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

import grpc

from gpufair.api.metrics.v1 import metrics_service_pb2 as pb
from gpufair.local.stack import start_service

METHOD = "/gpufair.metrics.v1.MetricsService/ReportTelemetry"


def _batches(job: str, rank: int, per_msg: int, n_msgs: int, t0: float) -> list[bytes]:
    """Serialised requests of one (job, rank): steps keep increasing, like a real trainer's."""
    out = []
    for m in range(n_msgs):
        first = m * per_msg
        recs = [pb.StepRecord(step=s, local_batch=32, compute_s=0.018 + (s % 7) * 1e-4, data_wait_s=0.001, samples_total=(s + 1) * 32,
                              steps_total=s + 1, unix_time_s=t0 + s * 0.02) for s in range(first, first + per_msg)]
        out.append(pb.ReportTelemetryRequest(job_id=job, rank=rank, node="bench", device_id=f"dev-{rank}", global_batch=64,
                                             total_samples=10**9, records=recs, batch_seq=m + 1).SerializeToString())
    return out


async def _stream(channel: grpc.aio.Channel, msgs: list[bytes], deadline: float) -> int:
    call = channel.stream_stream(METHOD, request_serializer=None, response_deserializer=pb.ReportTelemetryResponse.FromString)

    async def requests():
        for m in msgs:
            if time.perf_counter() > deadline:
                return
            yield m

    accepted = 0
    async for ack in call(requests()):
        accepted += ack.accepted
        if ack.rejected:
            raise RuntimeError(f"service rejected records: {ack.error}")
    return accepted


def sender(index: int, address: str, tag: str, streams: list[int], per_msg: int, n_msgs: int, seconds: float, cpus: set[int] | None,
           ready: mp.Barrier, out: mp.Queue) -> None:
    try:
        if cpus:
            os.sched_setaffinity(0, cpus)
        t0 = time.time()
        data = {s: _batches(f"bench-{tag}-{s // 2}", s % 2, per_msg, n_msgs, t0) for s in streams}
    except BaseException:
        ready.abort()  # the parent's wait fails instead of hanging
        raise

    async def run() -> tuple[int, float]:
        async with grpc.aio.insecure_channel(address) as ch:
            await ch.channel_ready()
            await asyncio.to_thread(ready.wait)
            start = time.perf_counter()
            counts = await asyncio.gather(*(_stream(ch, data[s], start + seconds) for s in streams))
            return sum(counts), time.perf_counter() - start

    try:
        out.put((index, *asyncio.run(run())))
    except Exception as exc:  # noqa: BLE001 - reported by the parent
        out.put((index, -1, repr(exc)))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(address: str, tag: str, service_pid: int, streams: int, per_msg: int, seconds: float, senders: int, cpus: set[int] | None,
            expect_rate: float) -> tuple[float, float]:
    """(accepted records per wall second, the service's CPU seconds per wall second) over the run."""
    n_msgs = max(2, int(expect_rate * seconds * 1.5 / streams / per_msg) + 1)
    ctx = mp.get_context("spawn")
    ready, out = ctx.Barrier(senders + 1), ctx.Queue()
    groups = [list(range(i, streams, senders)) for i in range(senders)]
    procs = [ctx.Process(target=sender, args=(i, address, tag, g, per_msg, n_msgs, seconds, cpus, ready, out)) for i, g in enumerate(groups)]
    for p in procs:
        p.start()
    ready.wait(timeout=300)
    cpu0 = cpu_seconds(service_pid)
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    failed = [r for r in results if r[1] < 0]
    if failed:
        raise RuntimeError(f"sender failed: {failed}")
    cpu = cpu_seconds(service_pid) - cpu0
    total = sum(r[1] for r in results)
    wall = max(r[2] for r in results)
    return total / wall, cpu / wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--batch", type=int, default=256, help="records per message in the batched run")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each timed run")
    parser.add_argument("--senders", type=int, default=2, help="sender processes")
    parser.add_argument("--rounds", type=int, default=2, help="alternating batched / single rounds")
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    service_cpu = {cores[0]}
    sender_cpus = set(cores[1:]) or None
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, GPUFAIR_LISTEN="127.0.0.1:0", GPUFAIR_LOG_LEVEL="WARNING")
        env.pop("GPUFAIR_PROMETHEUS_PORT", None)
        child, port = start_service("gpufair.metrics", env, Path(tmp) / "metrics.log")
        try:
            os.sched_setaffinity(child.proc.pid, service_cpu)
            address = f"127.0.0.1:{port}"
            print(f"metrics service pid {child.proc.pid} pinned to cpu {sorted(service_cpu)}; senders on {sorted(sender_cpus or cores)}; "
                  f"{args.streams} streams, {args.senders} sender processes, {args.seconds:.0f} s per run")
            rates: dict[int, list[float]] = {args.batch: [], 1: []}
            for round_ in range(args.rounds):
                for per_msg, expect in ((args.batch, 300_000), (1, 30_000)):
                    # Fresh job names per run: each (job, rank) must see increasing steps.
                    rate, busy = measure(address, f"r{round_}-{per_msg}", child.proc.pid, args.streams, per_msg, args.seconds, args.senders, sender_cpus, expect)
                    rates[per_msg].append(rate)
                    print(f"  {per_msg:>4} records/message: {rate:>10,.0f} records/s, service CPU {busy:.0%} of one core "
                          f"({rate / max(busy, 1e-9):,.0f} records per service CPU-second)")
        finally:
            child.stop()
    best = {k: max(v) for k, v in rates.items()}
    print(f"batched ({args.batch}/message): {best[args.batch]:,.0f} records/s (best of {args.rounds}); "
          f"one per message: {best[1]:,.0f} records/s; ratio {best[args.batch] / best[1]:.1f}x; "
          f"target 100,000 records/s: {'met' if best[args.batch] >= 100_000 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
