"""Simulated trainers for the load test: one asyncio process drives many jobs' ranks over real gRPC.

Each rank streams batched telemetry (one bidi stream per rank) and follows its
job's StreamCommands; a rank's compute cost grows with how many ranks share
its device, so the scheduler has real reasons to re-split.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import grpc

from gpufair.api.metrics.v1 import metrics_service_pb2 as mpb
from gpufair.api.metrics.v1 import metrics_service_pb2_grpc as mpb_grpc
from gpufair.api.scheduler.v1 import scheduler_service_pb2 as spb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as spb_grpc


@dataclass(frozen=True)
class SimJob:
    job_id: str
    devices: tuple[str, ...]
    global_batch: int
    cost_s: tuple[float, ...]  # per-sample compute cost of each rank (device speed x sharing)


@dataclass
class SimStats:
    records_sent: int = 0
    records_acked: int = 0
    max_unacked_batches: int = 0
    commands: int = 0
    latencies_s: list[float] = field(default_factory=list)
    errors: int = 0


async def _telemetry(stub: mpb_grpc.MetricsServiceStub, job: SimJob, rank: int, split: list[int], stats: SimStats,
                     steps_per_s: float, flush_s: float, until: float) -> None:
    sent_batches, acked = 0, 0
    step, samples = 0, 0

    async def batches():  # type: ignore[no-untyped-def]
        nonlocal step, samples, sent_batches
        t0 = time.time()
        while time.time() < until:
            await asyncio.sleep(flush_s)
            n_steps = int((time.time() - t0) * steps_per_s) - step
            records = []
            for _ in range(max(n_steps, 0)):
                step += 1
                b = split[rank]
                samples += b
                records.append(mpb.StepRecord(step=step, local_batch=b, compute_s=job.cost_s[rank] * b, samples_total=samples,
                                              steps_total=step, unix_time_s=t0 + step / steps_per_s))
            if records:
                sent_batches += 1
                stats.records_sent += len(records)
                stats.max_unacked_batches = max(stats.max_unacked_batches, sent_batches - acked)
                yield mpb.ReportTelemetryRequest(job_id=job.job_id, rank=rank, node="sim", device_id=job.devices[rank],
                                                 global_batch=job.global_batch, total_samples=10**9, records=records, batch_seq=sent_batches)

    async for ack in stub.ReportTelemetry(batches()):
        acked += 1
        stats.records_acked += ack.accepted


async def _follow(stub: spb_grpc.SchedulerServiceStub, job: SimJob, rank: int, split: list[int], stats: SimStats, until: float) -> None:
    known, first = 0, True
    call = stub.StreamCommands(spb.StreamCommandsRequest(job_id=job.job_id, rank=rank, known_version=known))
    try:
        async for msg in call:
            received = time.time()
            c = msg.command
            if c.version > known:
                known = c.version
                if rank == 0:
                    split[:] = list(c.batch_sizes)
                if not first:  # the first message is the catch-up of the current split, not a new one
                    stats.latencies_s.append(received - c.issued_unix_s)
                    stats.commands += 1
            first = False
            if received > until:
                break
    finally:
        call.cancel()


async def _run_job(maddr: str, saddr: str, job: SimJob, stats: SimStats, steps_per_s: float, flush_s: float, until: float) -> None:
    async with grpc.aio.insecure_channel(maddr) as mch, grpc.aio.insecure_channel(saddr) as sch:
        sstub, mstub = spb_grpc.SchedulerServiceStub(sch), mpb_grpc.MetricsServiceStub(mch)
        spec = spb.JobSpec(job_id=job.job_id, model="sim", global_batch=job.global_batch, total_samples=10**9,
                           ranks=[spb.RankPlacement(rank=r, node="sim", device_id=d, device_type="sim") for r, d in enumerate(job.devices)])
        res = await sstub.RegisterJob(spb.RegisterJobRequest(spec=spec))
        split = list(res.job.split.batch_sizes)  # shared by the job's ranks: rank 0's follower updates it
        n = len(job.devices)
        tasks = [_follow(sstub, job, r, split, stats, until) for r in range(n)]
        tasks += [_telemetry(mstub, job, r, split, stats, steps_per_s, flush_s, until) for r in range(n)]
        results = await asyncio.gather(*(asyncio.wait_for(t, until - time.time() + 5) for t in tasks), return_exceptions=True)
        stats.errors += sum(1 for r in results if isinstance(r, BaseException) and not isinstance(r, asyncio.TimeoutError))


def run_process(maddr: str, saddr: str, jobs: list[SimJob], duration_s: float, steps_per_s: float, flush_s: float) -> dict:
    """Entry point of one simulator process; returns its totals."""
    stats = SimStats()
    until = time.time() + duration_s

    async def main() -> None:
        await asyncio.gather(*(_run_job(maddr, saddr, j, stats, steps_per_s, flush_s, until) for j in jobs))

    asyncio.run(main())
    return stats.__dict__
