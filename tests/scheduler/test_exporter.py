"""The scheduler's OpenTelemetry gauges: splits per rank (any replica), slow-downs (leader)."""

from __future__ import annotations

import asyncio

import grpc
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from gpufair.common.config import CommonConfig
from gpufair.metrics.app import start as start_metrics
from gpufair.scheduler.app import start_replica
from gpufair.scheduler.exporter import register_instruments
from gpufair.scheduler.sources import PolicySettings


def _points(reader: InMemoryMetricReader, name: str) -> dict[tuple, float]:
    out = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == name:
                    out.update({tuple(sorted(p.attributes.items())): p.value for p in m.data.data_points})
    return out


def _placed_count(reader: InMemoryMetricReader) -> int:
    return sum(p.count for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics
               if m.name == "gpufair_admission_wait_seconds" for p in m.data.data_points)


async def test_split_gauges_follow_the_registry(etcd_endpoint: str, etcd_root: str) -> None:
    replica = await start_replica(CommonConfig(listen="127.0.0.1:0", etcd=etcd_endpoint, etcd_root=etcd_root, metrics_addr="127.0.0.1:1"),
                                  PolicySettings("even", 1.0, 0.05))
    reader = InMemoryMetricReader()
    register_instruments(replica.registry, replica.loop, asyncio.get_running_loop(), MeterProvider(metric_readers=[reader]).get_meter("t"))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{replica.server.port}") as ch:
            stub = pb_grpc.SchedulerServiceStub(ch)
            spec = pb.JobSpec(job_id="job-e", model="m", global_batch=10, total_samples=100,
                              ranks=[pb.RankPlacement(rank=i, device_id=f"g{i}") for i in range(2)])
            await stub.RegisterJob(pb.RegisterJobRequest(spec=spec))
            await stub.PinSplit(pb.PinSplitRequest(job_id="job-e", batch_sizes=[7, 3]))
            for _ in range(100):
                points = await asyncio.to_thread(_points, reader, "gpufair_job_split_batch")  # collected off the loop, as a scrape is
                if points.get((("job", "job-e"), ("rank", "0"))) == 7:
                    break
                await asyncio.sleep(0.05)
            assert points == {(("job", "job-e"), ("rank", "0")): 7, (("job", "job-e"), ("rank", "1")): 3}
    finally:
        await replica.close()


async def test_queue_gauges_and_admission_waits(etcd_endpoint: str, etcd_root: str) -> None:
    metrics, _ = await start_metrics(CommonConfig(listen="127.0.0.1:0"))  # rounds run while it answers
    replica = await start_replica(CommonConfig(listen="127.0.0.1:0", etcd=etcd_endpoint, etcd_root=etcd_root,
                                               metrics_addr=f"127.0.0.1:{metrics.port}"),
                                  PolicySettings("sd-maxmin", 0.2, 0.05, "sd", "sd", "paced"))
    reader = InMemoryMetricReader()
    register_instruments(replica.registry, replica.loop, asyncio.get_running_loop(), MeterProvider(metric_readers=[reader]).get_meter("t"))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{replica.server.port}") as ch:
            stub = pb_grpc.SchedulerServiceStub(ch)
            # Two jobs want both GPUs; nobody registers, so the first placed keeps them and the other waits.
            for job in ("first", "second"):
                await stub.SubmitJob(pb.SubmitJobRequest(submission=pb.Submission(
                    job_id=job, num_gpus=2, node="n", devices=["d0", "d1"], global_batch=8, total_samples=800,
                    exclusive_samples_per_s=1.0)))
            # The gauges read the leader's last round; ListQueue its record in etcd, written
            # near the end of that round; the histogram is fed after both: wait for all four.
            for _ in range(200):
                length = await asyncio.to_thread(_points, reader, "gpufair_queue_length")
                waits = await asyncio.to_thread(_points, reader, "gpufair_queue_wait_seconds")
                admitted = await asyncio.to_thread(_placed_count, reader)
                entries = (await stub.ListQueue(pb.ListQueueRequest())).entries
                if length.get((("waiting", "submitted"),)) == 1 and len(entries) == 1 and waits and admitted:
                    break
                await asyncio.sleep(0.05)
            assert length == {(("waiting", "submitted"),): 1, (("waiting", "held"),): 0}
            (waiting,) = entries
            assert list(waits) == [(("job", waiting.job_id),)] and waits[(("job", waiting.job_id),)] >= 0
        assert _placed_count(reader) == 1  # the other one, placed once however many rounds ran
    finally:
        await replica.close()
        await metrics.stop(0)
