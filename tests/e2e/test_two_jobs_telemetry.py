"""Two real 2-rank gloo jobs stream to a real metrics service; its numbers match the trainers';
the example says what it joined and how it goes, and its sessions end the jobs' lives."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import grpc
import pytest

from gpufair.api.metrics.v1 import metrics_service_pb2 as mpb
from gpufair.api.metrics.v1 import metrics_service_pb2_grpc as mpb_grpc
from gpufair.common.config import CommonConfig
from gpufair.local.launch import launch
from gpufair.metrics.app import start as start_metrics
from gpufair.scheduler.app import start_replica
from gpufair.scheduler.sources import PolicySettings

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_ddp.py"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


async def _wait(job, timeout: float) -> list[int]:
    return await asyncio.to_thread(job.wait, timeout)


async def test_metrics_match_what_two_real_ddp_jobs_measured(tmp_path: Path, etcd_endpoint: str, etcd_root: str) -> None:
    metrics, _ = await start_metrics(CommonConfig(listen="127.0.0.1:0"))
    cfg = CommonConfig(listen="127.0.0.1:0", etcd=etcd_endpoint, etcd_root=etcd_root, metrics_addr=f"127.0.0.1:{metrics.port}")
    sched = await start_replica(cfg, PolicySettings("even", 0.5, 0.05))
    env = dict(os.environ, GPUFAIR_METRICS_ADDR=f"127.0.0.1:{metrics.port}", GPUFAIR_SCHEDULER_ADDR=f"127.0.0.1:{sched.server.port}",
               GPUFAIR_EMU_GPUS="2", GPUFAIR_EMU_DIR=str(tmp_path / "emu"))
    jobs = []
    try:
        for name, batch in [("job-x", 64), ("job-y", 32)]:
            # job-x runs on two emulated GPUs (one list, mapped by LOCAL_RANK as under torchrun), job-y on plain CPUs.
            emu = ["--emu-device", "0,1"] if name == "job-x" else []
            jobs.append(launch(name, [str(EXAMPLE), "--job", name, "--global-batch", str(batch), "--epochs", "1", "--dataset-size", "2048",
                                      "--hidden", "64", "--stats-out", str(tmp_path / name), "--log-every", "8", *emu], 2, tmp_path, env))
        for job in jobs:
            codes = await _wait(job, 180)
            assert codes == [0, 0], job.logs()
        logs = {job.name: job.logs() for job in jobs}
        assert "[job-x rank 0/2] registered with gpufair; split 32/32; emulated GPU 0" in logs["job-x"]
        assert "[job-x rank 1/2] registered with gpufair; split 32/32; emulated GPU 1" in logs["job-x"]
        assert "[job-y] step 8  loss " in logs["job-y"] and "samples/s  split 16/16" in logs["job-y"], logs["job-y"]
        from gpufair.api.scheduler.v1 import scheduler_service_pb2 as spb
        from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as spb_grpc

        async with grpc.aio.insecure_channel(f"127.0.0.1:{sched.server.port}") as ch:
            stub = spb_grpc.SchedulerServiceStub(ch)
            # Each session's close() ended its job: none is active, both are finished with their samples.
            assert not (await stub.ListJobs(spb.ListJobsRequest())).jobs
            ended = {j.spec.job_id: j for j in (await stub.ListJobs(spb.ListJobsRequest(include_finished=True))).jobs}
            assert {j: (e.state, e.samples_done) for j, e in ended.items()} == {
                "job-x": (spb.JOB_STATE_FINISHED, 2048), "job-y": (spb.JOB_STATE_FINISHED, 2048)}
        async with grpc.aio.insecure_channel(f"127.0.0.1:{metrics.port}") as ch:
            stub = mpb_grpc.MetricsServiceStub(ch)
            for name, batch in [("job-x", 64), ("job-y", 32)]:
                mine = [json.loads((tmp_path / f"{name}.rank{r}.json").read_text()) for r in range(2)]
                assert all(m["registered"] for m in mine[:1])
                stats = (await stub.GetJobStats(mpb.GetJobStatsRequest(job_id=name))).stats
                steps = mine[0]["steps"]
                assert steps == 2048 // batch
                assert stats.steps_done == steps and stats.samples_done == sum(m["samples"] for m in mine) == 2048
                assert stats.progress == pytest.approx(1.0)
                for r, m in enumerate(mine):
                    rs = stats.ranks[r]
                    assert rs.samples_total == m["samples"] and rs.last_step == steps - 1
                    # The service's per-sample cost is the trainer's measured compute, up to loop overhead:
                    # on an emulated GPU the time it held the device, else the loop body's.
                    measured = m["busy_s"] if name == "job-x" else m["compute_s"]
                    assert rs.compute_s_per_sample * m["samples"] == pytest.approx(measured, rel=0.5)
            jobs_seen = {j.job_id for j in (await stub.ListJobStats(mpb.ListJobStatsRequest())).jobs}
            assert {"job-x", "job-y"} <= jobs_seen
            devices = {d.device_id: d for d in (await stub.ListDeviceStats(mpb.ListDeviceStatsRequest())).devices}
            emulated = [d for d in devices.values() if d.source == mpb.DEVICE_SOURCE_EMULATED]
            assert len(emulated) == 2 and all([o.job_id for o in d.occupants] == ["job-x"] for d in emulated)
            assert all(0 < d.utilization_percent <= 100 for d in emulated)
            assert sum(1 for d in devices.values() if d.device_id.startswith("cpu-")) == 2  # job-y's ranks
    finally:
        for job in jobs:
            job.kill()
        await sched.close()
        await metrics.stop(0)


async def test_a_job_the_scheduler_refuses_fails_on_every_rank_instead_of_hanging(tmp_path: Path, etcd_endpoint: str, etcd_root: str) -> None:
    from gpufair.api.scheduler.v1 import scheduler_service_pb2 as spb
    from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as spb_grpc

    cfg = CommonConfig(listen="127.0.0.1:0", etcd=etcd_endpoint, etcd_root=etcd_root, metrics_addr="127.0.0.1:1")
    sched = await start_replica(cfg, PolicySettings("even", 1.0, 0.05))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{sched.server.port}") as ch:
            # Someone else already registered job-z with another shape.
            spec = spb.JobSpec(job_id="job-z", model="other", global_batch=16, total_samples=100,
                               ranks=[spb.RankPlacement(rank=0, device_id="g0")])
            await spb_grpc.SchedulerServiceStub(ch).RegisterJob(spb.RegisterJobRequest(spec=spec))
        env = dict(os.environ, GPUFAIR_SCHEDULER_ADDR=f"127.0.0.1:{sched.server.port}", GPUFAIR_METRICS_ADDR="127.0.0.1:1")
        job = launch("job-z", [str(EXAMPLE), "--job", "job-z", "--global-batch", "32", "--dataset-size", "256"], 2, tmp_path, env)
        try:
            codes = await _wait(job, 90)
        finally:
            job.kill()
        assert all(c != 0 for c in codes), job.logs()
        assert job.logs().count("refused job 'job-z'") >= 2  # both ranks say why
    finally:
        await sched.close()
