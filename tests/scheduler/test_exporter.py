"""The scheduler's OpenTelemetry gauges: splits per rank (any replica), slow-downs (leader)."""

from __future__ import annotations

import asyncio

import grpc
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from gpufair.common.config import CommonConfig
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
