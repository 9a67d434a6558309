"""MetricsService: a thin adapter from protobuf to `MetricsStore` and back."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc

from gpufair.api.metrics.v1 import metrics_service_pb2 as pb
from gpufair.api.metrics.v1 import metrics_service_pb2_grpc as pb_grpc
from gpufair.common.errors import GpufairError, InvalidArgument, bounded
from gpufair.metrics.core import DeviceStats, JobStats, Record, make_record, validate_header
from gpufair.metrics.store import MetricsStore, require_job

logger = logging.getLogger(__name__)


def _records(req: pb.ReportTelemetryRequest) -> tuple[list[Record], int, str]:
    """Validated records of a batch; invalid ones are counted and described, not stored."""
    out: list[Record] = []
    bad, error = 0, ""
    for i, r in enumerate(req.records):
        dev = r.device if r.HasField("device") and r.device.source else None
        try:
            out.append(make_record(r.step, r.local_batch, r.compute_s, r.data_wait_s, r.samples_total, r.steps_total, r.unix_time_s,
                                   dev.utilization_percent if dev else None, dev.memory_used_bytes if dev else 0, dev.source if dev else 0))
        except InvalidArgument as exc:
            bad += 1
            error = error or f"records[{i}]: {exc}"
    return out, bad, error


def job_to_pb(s: JobStats) -> pb.JobStats:
    return pb.JobStats(
        job_id=s.job_id, samples_per_s=s.samples_per_s, samples_per_s_smoothed=s.samples_per_s_smoothed,
        samples_done=s.samples_done, samples_total=s.samples_total, progress=s.progress, steps_done=s.steps_done,
        data_stall_fraction=s.data_stall_fraction, first_report_unix_s=s.first_t, last_report_unix_s=s.last_t,
        global_batch=s.global_batch,
        ranks=[pb.RankStats(rank=r.rank, node=r.node, device_id=r.device_id, local_batch=r.local_batch,
                            compute_s_per_sample=r.compute_s_per_sample, compute_s_fixed=r.compute_s_fixed,
                            step_time_s=r.step_time_s, data_stall_fraction=r.data_stall_fraction,
                            samples_total=r.samples_total, last_step=r.last_step, last_report_unix_s=r.last_t,
                            dropped_total=r.dropped_total) for r in s.ranks],
    )


def device_to_pb(d: DeviceStats) -> pb.DeviceStats:
    return pb.DeviceStats(
        device_id=d.device_id, node=d.node, utilization_percent=d.utilization_percent, memory_used_bytes=d.memory_used,
        source=d.source, occupants=[pb.DeviceOccupant(job_id=o.job, rank=o.rank, busy_fraction=o.busy_fraction,
                                                      compute_s_per_step=o.compute_s_per_step, holds_back=o.holds_back)
                                    for o in d.occupants],
    )


class MetricsServicer(pb_grpc.MetricsServiceServicer):
    def __init__(self, store: MetricsStore) -> None:
        self._store = store

    async def ReportTelemetry(self, request_iterator: AsyncIterator[pb.ReportTelemetryRequest], context: grpc.aio.ServicerContext) -> AsyncIterator[pb.ReportTelemetryResponse]:
        async for req in request_iterator:
            try:
                validate_header(req.job_id, req.rank, req.node, req.device_id, req.global_batch, req.total_samples, len(req.records))
            except GpufairError as exc:
                # A bad batch is refused, the stream (and everyone else) goes on.
                yield pb.ReportTelemetryResponse(batch_seq=req.batch_seq, rejected=len(req.records), error=bounded(str(exc)))
                continue
            records, bad, error = _records(req)
            res = self._store.ingest(req.job_id, req.rank, req.node, req.device_id, req.global_batch, req.total_samples, req.dropped_total,
                                     records, req.incarnation)
            yield pb.ReportTelemetryResponse(batch_seq=req.batch_seq, accepted=res.accepted, rejected=res.rejected + bad, error=bounded(error or res.error))

    async def GetJobStats(self, request: pb.GetJobStatsRequest, context: grpc.aio.ServicerContext) -> pb.GetJobStatsResponse:
        return pb.GetJobStatsResponse(stats=job_to_pb(require_job(self._store, request.job_id)))

    async def ListJobStats(self, request: pb.ListJobStatsRequest, context: grpc.aio.ServicerContext) -> pb.ListJobStatsResponse:
        return pb.ListJobStatsResponse(jobs=[job_to_pb(s) for s in self._store.jobs()])

    async def ListDeviceStats(self, request: pb.ListDeviceStatsRequest, context: grpc.aio.ServicerContext) -> pb.ListDeviceStatsResponse:
        return pb.ListDeviceStatsResponse(devices=[device_to_pb(d) for d in self._store.devices()])

    async def WatchJobStats(self, request: pb.WatchJobStatsRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.WatchJobStatsResponse]:
        interval = request.interval_s or 1.0
        if not 0.1 <= interval <= 60:
            raise InvalidArgument(f"interval_s={interval} is out of range [0.1, 60]")
        while True:
            if request.job_id:
                jobs = [require_job(self._store, request.job_id)]
            else:
                jobs = self._store.jobs()
            yield pb.WatchJobStatsResponse(jobs=[job_to_pb(s) for s in jobs])
            await asyncio.sleep(interval)
