"""The metrics service over real gRPC: numbers follow the records, garbage is contained."""

from __future__ import annotations

import grpc
import pytest

from gpufair.api.metrics.v1 import metrics_service_pb2 as pb
from gpufair.api.metrics.v1 import metrics_service_pb2_grpc as pb_grpc
from gpufair.common.config import CommonConfig
from gpufair.metrics.app import start


@pytest.fixture
async def stub():
    running, _store = await start(CommonConfig(listen="127.0.0.1:0"))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
        yield pb_grpc.MetricsServiceStub(ch)
    await running.stop(0)


def _batch(job: str, rank: int, steps: range, batch: int, compute: float, wait: float, t0: float, step_s: float, **kw) -> pb.ReportTelemetryRequest:
    records = [
        pb.StepRecord(step=s, local_batch=batch, compute_s=compute, data_wait_s=wait, samples_total=(s + 1) * batch,
                      steps_total=s + 1, unix_time_s=t0 + (s + 1) * step_s)
        for s in steps
    ]
    return pb.ReportTelemetryRequest(job_id=job, rank=rank, node="n1", device_id=f"emu-{rank}", global_batch=kw.get("gb", 64),
                                     total_samples=kw.get("total", 6400), records=records, batch_seq=kw.get("seq", 0))


async def test_rates_progress_and_stall_follow_the_records(stub) -> None:
    reqs = [_batch("job-a", 0, range(0, 50), 48, 0.06, 0.02, 1000.0, 0.1), _batch("job-a", 1, range(0, 50), 16, 0.02, 0.0, 1000.0, 0.1)]
    acks = [a async for a in stub.ReportTelemetry(iter(reqs))]
    assert [a.accepted for a in acks] == [50, 50] and all(a.rejected == 0 for a in acks)
    stats = (await stub.GetJobStats(pb.GetJobStatsRequest(job_id="job-a"))).stats
    assert stats.samples_done == 50 * 64 and stats.progress == pytest.approx(50 * 64 / 6400)
    assert stats.samples_per_s_smoothed == pytest.approx(640.0, rel=1e-6)  # 64 samples every 0.1 s
    r0, r1 = stats.ranks
    assert r0.compute_s_per_sample == pytest.approx(0.06 / 48) and r1.compute_s_per_sample == pytest.approx(0.02 / 16)
    assert r0.data_stall_fraction == pytest.approx(0.2, rel=1e-6) and r1.data_stall_fraction == 0
    devices = (await stub.ListDeviceStats(pb.ListDeviceStatsRequest())).devices
    assert {d.device_id: d.utilization_percent for d in devices} == pytest.approx({"emu-0": 60.0, "emu-1": 20.0})


async def test_malformed_records_are_rejected_without_touching_other_jobs(stub) -> None:
    good = _batch("job-good", 0, range(0, 10), 32, 0.01, 0.0, 10.0, 0.05, gb=32)
    bad_id = _batch("../job-good", 0, range(0, 10), 32, 0.01, 0.0, 10.0, 0.05, seq=1)
    bad_values = _batch("job-bad", 0, range(0, 3), 32, 0.01, 0.0, 10.0, 0.05, seq=2)
    bad_values.records[1].compute_s = float("nan")
    backwards = _batch("job-good", 0, range(3, 5), 32, 0.01, 0.0, 10.0, 0.05, seq=3, gb=32)  # steps already seen
    acks = [a async for a in stub.ReportTelemetry(iter([good, bad_id, bad_values, backwards]))]
    assert acks[0].accepted == 10
    assert acks[1].accepted == 0 and "job_id" in acks[1].error
    assert acks[2].accepted == 2 and acks[2].rejected == 1 and "records[1]" in acks[2].error and "compute_s" in acks[2].error
    assert acks[3].accepted == 0 and acks[3].rejected == 2 and "not after step 9" in acks[3].error
    stats = (await stub.GetJobStats(pb.GetJobStatsRequest(job_id="job-good"))).stats
    assert stats.samples_done == 320 and stats.ranks[0].last_step == 9


async def test_counters_too_large_to_total_are_refused_and_listing_still_works(stub) -> None:
    # Steps x the global batch, or samples summed over ranks, would pass int64 and
    # break every later listing of the job: such a record is refused, named.
    huge = _batch("job-huge", 0, range(0, 2), 32, 0.01, 0.0, 10.0, 0.05, gb=1 << 24)
    huge.records[1].steps_total = 1 << 60
    acks = [a async for a in stub.ReportTelemetry(iter([huge]))]
    assert acks[0].accepted == 1 and acks[0].rejected == 1 and "steps_total" in acks[0].error
    listed = (await stub.ListJobStats(pb.ListJobStatsRequest())).jobs
    assert [j.samples_done for j in listed if j.job_id == "job-huge"] == [1 << 24]


async def test_queries_validate_their_input(stub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.GetJobStats(pb.GetJobStatsRequest(job_id=""))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.GetJobStats(pb.GetJobStatsRequest(job_id="nobody"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in stub.WatchJobStats(pb.WatchJobStatsRequest(interval_s=1000)):
            pass
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "interval_s" in err.value.details()


async def test_progress_survives_a_service_restart_because_counters_are_cumulative() -> None:
    for attempt in range(2):  # second service instance sees only the later records
        running, _ = await start(CommonConfig(listen="127.0.0.1:0"))
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
                s = pb_grpc.MetricsServiceStub(ch)
                steps = range(0, 20) if attempt == 0 else range(30, 40)
                _ = [a async for a in s.ReportTelemetry(iter([_batch("job-r", 0, steps, 32, 0.01, 0, 0.0, 0.1, gb=32)]))]
                stats = (await s.GetJobStats(pb.GetJobStatsRequest(job_id="job-r"))).stats
                assert stats.samples_done == steps[-1] * 32 + 32
        finally:
            await running.stop(0)


async def test_a_trainer_resumed_from_an_earlier_checkpoint_is_followed(stub) -> None:
    before = _batch("job-ckpt", 0, range(0, 100), 32, 0.01, 0, 0.0, 0.1, gb=32)
    # The process died at step 99 and resumed from the checkpoint of step 60: a new local counter.
    before.incarnation = 1
    after = _batch("job-ckpt", 0, range(60, 80), 32, 0.01, 0, 20.0, 0.1, gb=32, seq=1)
    after.incarnation = 2
    for i, r in enumerate(after.records):
        r.samples_total, r.steps_total = (i + 1) * 32, 61 + i
    acks = [a async for a in stub.ReportTelemetry(iter([before, after]))]
    assert [a.accepted for a in acks] == [100, 20]
    stats = (await stub.GetJobStats(pb.GetJobStatsRequest(job_id="job-ckpt"))).stats
    assert stats.ranks[0].last_step == 79 and stats.steps_done == 80 and stats.samples_done == 80 * 32
