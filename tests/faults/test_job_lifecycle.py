"""A job's life through faults, with real processes: a 2-rank gloo job keeps its
slow-down across a kill -9 and restart of the metrics service (never below 1),
shows as running with its last known rate while metrics is down, and ends as
finished with its final figures when its session closes; a job whose trainers
are killed ends as failed once its ranks' leases are gone."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as spb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as spb_grpc
from gpufair.local.launch import LocalJob, launch
from fault_support import PACED_TRAINER, Service, service_env, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

BATCH, DATASET = 32, 9600  # 300 steps of ~0.06 s


def _start(tmp_path: Path, etcd: str, root: str, name: str, dataset: int, lost_s: float,
           profile: spb.Profile | None = None) -> tuple[Service, Service, LocalJob]:
    """Metrics and a scheduler as processes (metrics on a port kept across restarts), and a paced 2-rank job."""
    env = service_env(etcd, root, tmp_path, GPUFAIR_POLICY="even", GPUFAIR_JOB_LOST_S=str(lost_s))
    metrics = Service("gpufair.metrics", env, tmp_path / "metrics.log").start()
    env["GPUFAIR_METRICS_ADDR"] = metrics.addr
    sched = Service("gpufair.scheduler", env, tmp_path / "sched.log").start()
    if profile is not None:
        with grpc.insecure_channel(sched.addr) as ch:
            spb_grpc.SchedulerServiceStub(ch).PutProfile(spb.PutProfileRequest(profile=profile), timeout=10, wait_for_ready=True)
    trainer_env = dict(env, GPUFAIR_SCHEDULER_ADDR=sched.addr, FAULT_STEP_S="0.05")
    job = launch(name, [str(PACED_TRAINER), "--job", name, "--global-batch", str(BATCH), "--epochs", "1",
                        "--dataset-size", str(dataset), "--hidden", "32"], 2, tmp_path, trainer_env)
    return metrics, sched, job


async def _job(stub: spb_grpc.SchedulerServiceStub, job: str, include_finished: bool = True) -> spb.JobSummary | None:
    try:
        listed = (await stub.ListJobs(spb.ListJobsRequest(include_finished=include_finished), timeout=5)).jobs
    except grpc.aio.AioRpcError:
        return None
    return next((j for j in listed if j.spec.job_id == job), None)


async def _sd_settled(stub: spb_grpc.SchedulerServiceStub, job: str, samples: list[float]) -> bool:
    """True once three refreshed, fresh slow-downs in a row agree within 3 %."""
    j = await _job(stub, job)
    if j is None or j.stale or j.slowdown <= 0 or j.progress < 0.1:
        return False
    if not samples or j.figures_unix_s != samples[-1]:
        samples.append(j.figures_unix_s)
        samples.append(j.slowdown)
    sds = samples[1::2][-3:]
    return len(sds) == 3 and max(sds) <= 1.03 * min(sds)


async def test_slowdown_survives_a_metrics_restart_and_close_records_the_end(tmp_path: Path, etcd_endpoint: str,
                                                                             etcd_root: str) -> None:
    # A profile 4x faster than the paced trainer runs alone: its SD is ~4, so a wrong elapsed time shows.
    profile = spb.Profile(model="mlp-32", device_type="cpu", fit=spb.StepTimeFit(a_s=0.015, c_s=0.0))
    metrics, sched, job = _start(tmp_path, etcd_endpoint, etcd_root, "life", DATASET, lost_s=3, profile=profile)
    try:
        async with grpc.aio.insecure_channel(sched.addr) as ch:
            stub = spb_grpc.SchedulerServiceStub(ch)
            seen: list[float] = []
            await until(lambda: _sd_settled(stub, "life", seen), 60, "a settled slow-down with metrics up")
            before = await _job(stub, "life")
            assert before.state == spb.JOB_STATE_RUNNING and before.slowdown > 2.0 and before.started_unix_s > 0
            assert before.exclusive_source == "profile"

            metrics.kill9()
            assert job.alive(), job.logs()
            await until(lambda: _stale(stub), 10, "a refresh while metrics is down")
            down = await _job(stub, "life", include_finished=False)
            # Not "pending, 0 %": still running on both ranks, with its last known rate, marked stale.
            assert down.state == spb.JOB_STATE_RUNNING and down.live_ranks == 2 and down.stale
            assert down.samples_per_s > 0 and down.progress >= before.progress and down.slowdown >= 1.0

            metrics.start()  # same port: the trainers' reporters reconnect
            after_seen: list[float] = []
            await until(lambda: _sd_settled(stub, "life", after_seen), 60, "a settled slow-down after the restart")
            after = await _job(stub, "life")
            assert not after.stale and after.slowdown >= 1.0
            assert after.slowdown == pytest.approx(before.slowdown, rel=0.05), (before, after)
            assert after.elapsed_s >= before.elapsed_s  # from the start recorded in etcd, not the new metrics windows

            codes = await asyncio.to_thread(job.wait, 120)
            assert codes == [0, 0], job.logs()
            # session.close() on rank 0 ended the job: it left the active list, its record stays with final figures.
            assert await _job(stub, "life", include_finished=False) is None
            done = await _job(stub, "life")
            assert done.state == spb.JOB_STATE_FINISHED and done.ended_unix_s > done.started_unix_s
            assert done.samples_done == DATASET and done.progress == 1.0 and done.slowdown >= 1.0
            assert done.elapsed_s == pytest.approx(done.ended_unix_s - done.started_unix_s)
    finally:
        job.kill()
        sched.stop()
        metrics.stop()


async def test_a_killed_job_ends_as_failed_when_its_ranks_are_gone(tmp_path: Path, etcd_endpoint: str, etcd_root: str) -> None:
    metrics, sched, job = _start(tmp_path, etcd_endpoint, etcd_root, "doomed", DATASET * 4, lost_s=2)
    try:
        async with grpc.aio.insecure_channel(sched.addr) as ch:
            stub = spb_grpc.SchedulerServiceStub(ch)
            await until(lambda: _running_on(stub, "doomed", 2), 60, "both ranks joined")
            job.kill()  # SIGKILL: no session.close(), no deregistration
            await until(lambda: _ended(stub, "doomed"), 20, "the job ends once its ranks are gone")
            ended = await _job(stub, "doomed")
            assert ended.state == spb.JOB_STATE_FAILED and "without closing" in ended.state_reason
            assert await _job(stub, "doomed", include_finished=False) is None  # no ghost in `gpufair jobs`
    finally:
        job.kill()
        sched.stop()
        metrics.stop()


async def _stale(stub: spb_grpc.SchedulerServiceStub) -> bool:
    j = await _job(stub, "life")
    return j is not None and j.stale


async def _running_on(stub: spb_grpc.SchedulerServiceStub, job: str, ranks: int) -> bool:
    j = await _job(stub, job)
    return j is not None and j.state == spb.JOB_STATE_RUNNING and j.live_ranks == ranks


async def _ended(stub: spb_grpc.SchedulerServiceStub, job: str) -> bool:
    j = await _job(stub, job)
    return j is not None and j.state not in (spb.JOB_STATE_QUEUED, spb.JOB_STATE_RUNNING)
