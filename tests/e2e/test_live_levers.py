"""The scheduler's levers acting on real trainers: real etcd, real metrics and
scheduler services over gRPC, real 1- and 2-rank gloo jobs on emulated GPUs.

- a queued job waits before its first step without using its GPU, and
  finishes once admitted; the job it waited for runs at its alone speed
  (pacing gives it the GPU) instead of sharing it;
- `gpufair submit` places two jobs so the second avoids the first's GPUs;
- a leader's death mid-queue loses no submission and doubles none.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as spb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as spb_grpc
from gpufair.common.config import CommonConfig
from gpufair.metrics.app import start as start_metrics
from gpufair.scheduler.app import start_replica
from gpufair.scheduler.sources import PolicySettings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "train_ddp.py"
GPUFAIR = PolicySettings("sd-maxmin", 0.3, 0.05, "sd", "sd", "paced")
K8S = PolicySettings("even", 0.3, 0.05, "fifo", "least-loaded", "time-slicing")
MS_PER_SAMPLE = 1.5  # the emulated kernel time: 48 ms a step
RATE = 1000 / MS_PER_SAMPLE  # what each job trains at alone, as its submitter tells the scheduler
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


async def _stack(etcd_endpoint: str, etcd_root: str, tmp: Path, gpus: int, policy: PolicySettings):
    metrics, _ = await start_metrics(CommonConfig(listen="127.0.0.1:0"))
    cfg = CommonConfig(listen="127.0.0.1:0", etcd=etcd_endpoint, etcd_root=etcd_root,
                       metrics_addr=f"127.0.0.1:{metrics.port}")
    sched = await start_replica(cfg, policy)
    env = dict(os.environ, GPUFAIR_METRICS_ADDR=f"127.0.0.1:{metrics.port}",
               GPUFAIR_SCHEDULER_ADDR=f"127.0.0.1:{sched.server.port}", GPUFAIR_EMU_GPUS=str(gpus),
               GPUFAIR_EMU_DIR=str(tmp / "emu"), GPUFAIR_CACHE_ADDR="127.0.0.1:1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    return metrics, sched, cfg, env


def _stats(path: Path) -> dict:
    return json.loads(Path(f"{path}.rank0.json").read_text())


def _submit(name: str, gpus: int, samples: int, rate: float, env: dict, train: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "gpufair.client.cli.main", "submit", "--gpus", str(gpus), "--job", name,
         "--samples", str(samples), "--rate", str(rate), "--global-batch", "32", "--", str(EXAMPLE),
         "--global-batch", "32", "--dataset-size", str(samples), "--log-every", "0", *train],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


async def _finish(proc: subprocess.Popen, t0: float) -> tuple[str, float]:
    """(output, seconds from t0 to exit); the job must succeed."""
    out, _ = await asyncio.to_thread(proc.communicate, timeout=240)
    assert proc.returncode == 0, out
    return out, time.time() - t0


async def _pair(tmp: Path, etcd_endpoint: str, etcd_root: str, policy: PolicySettings) -> dict[str, dict]:
    """A long and a short 1-rank job on one emulated GPU, the short one submitted second."""
    metrics, sched, _, env = await _stack(etcd_endpoint, etcd_root, tmp, 1, policy)
    try:
        done = {}
        for name, samples in (("long", 6144), ("short", 1536)):
            t0 = time.time()
            proc = _submit(name, 1, samples, RATE, env, ["--hidden", "64", "--emu-ms-per-sample", str(MS_PER_SAMPLE),
                                                         "--stats-out", str(tmp / name)])
            done[name] = asyncio.ensure_future(_finish(proc, t0))
            await asyncio.sleep(4.0)  # the long one trains when the short one arrives
        out = {}
        for name, fut in done.items():
            log, jct = await fut
            out[name] = {**_stats(tmp / name), "log": log, "jct_s": jct}
        return out
    finally:
        await sched.close()
        await metrics.stop(0)


async def test_a_queued_job_waits_then_finishes_and_its_neighbour_gets_the_gpu(
        tmp_path: Path, etcd_endpoint: str, etcd_root: str) -> None:
    shared = await _pair(tmp_path / "k8s", etcd_endpoint, etcd_root + "/k8s", K8S)
    paced = await _pair(tmp_path / "gpufair", etcd_endpoint, etcd_root + "/gpufair", GPUFAIR)
    # Time-sliced, the short job shares the GPU from its start; paced, the scheduler
    # gives it the GPU (the more urgent job) and holds the long one at a step boundary.
    assert "held by the scheduler" in paced["long"]["log"], paced["long"]["log"]
    # Alone it trains in about half the time it takes sharing (the start-up of
    # torchrun and the submit round-trip are the same in both runs).
    assert paced["short"]["wall_s"] < 0.7 * shared["short"]["wall_s"], (paced, shared)
    assert paced["short"]["jct_s"] < shared["short"]["jct_s"], (paced, shared)
    # The held job waited without using its GPU, then trained to the end.
    assert paced["long"]["steps"] == shared["long"]["steps"] and paced["long"]["registered"]


async def test_submit_places_the_second_job_off_the_first_jobs_gpus(
        tmp_path: Path, etcd_endpoint: str, etcd_root: str) -> None:
    metrics, sched, _, env = await _stack(etcd_endpoint, etcd_root, tmp_path, 4, GPUFAIR)
    try:
        procs = []
        for name in ("first", "second"):
            procs.append(_submit(name, 2, 3072, 2000, env, ["--hidden", "128"]))
            await asyncio.sleep(1.5)
        outs = []
        for proc in procs:
            out, _ = await asyncio.to_thread(proc.communicate, timeout=240)
            assert proc.returncode == 0, out
            outs.append(out)
        placed = [line.split(" on ")[1].split(" after")[0].split(", ") for out in outs
                  for line in out.splitlines() if line.startswith("placed ")]
        assert len(placed) == 2 and not set(placed[0]) & set(placed[1]), outs
        # It says why: alone there, so its slow-down is about its wait for a round.
        why = re.search(r"placed second on .*: alone; neighbours: none; predicted SD ([0-9.]+)", outs[1])
        assert why and 1.0 <= float(why.group(1)) < 2.0, outs[1]
    finally:
        await sched.close()
        await metrics.stop(0)


async def test_a_leader_kill_mid_queue_loses_and_doubles_nothing(etcd_endpoint: str, etcd_root: str) -> None:
    metrics, _ = await start_metrics(CommonConfig(listen="127.0.0.1:0"))
    cfg = CommonConfig(listen="127.0.0.1:0", etcd=etcd_endpoint, etcd_root=etcd_root,
                       metrics_addr=f"127.0.0.1:{metrics.port}", lease_ttl=2)
    first = await start_replica(cfg, GPUFAIR, identity="a")
    second = None
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{first.server.port}") as ch:
            stub = spb_grpc.SchedulerServiceStub(ch)
            for i, gpus in enumerate((2, 2, 1, 2)):
                await stub.SubmitJob(spb.SubmitJobRequest(submission=spb.Submission(
                    job_id=f"q{i}", num_gpus=gpus, node="n", devices=["d0", "d1"], global_batch=8,
                    total_samples=1000 * (i + 1), exclusive_samples_per_s=1.0)))
            # Nobody registers: the first placed job never frees its GPUs, the rest wait.
            before = await _until_queue(stub, 3)
        second = await start_replica(cfg, GPUFAIR, identity="b")
        await first.close(0)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{second.server.port}") as ch:
            stub = spb_grpc.SchedulerServiceStub(ch)
            after = await _until_queue(stub, 3, newer_than=before[0])
            placed = [s for s in await _submissions(stub) if s.placed_devices]
        assert [e.job_id for e in after[1]] == [e.job_id for e in before[1]]
        assert [e.position for e in after[1]] == [1, 2, 3]
        assert len(placed) == 1 and {e.job_id for e in after[1]} | {placed[0].job_id} == {"q0", "q1", "q2", "q3"}
    finally:
        if second is not None:
            await second.close(0)
        await metrics.stop(0)


async def _until_queue(stub, n: int, newer_than: float = 0.0, timeout: float = 30.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        res = await stub.ListQueue(spb.ListQueueRequest())
        if len(res.entries) == n and res.decided_unix_s > newer_than:
            return res.decided_unix_s, list(res.entries)
        assert asyncio.get_running_loop().time() < deadline, res
        await asyncio.sleep(0.2)


async def _submissions(stub) -> list:
    out = []
    for i in range(4):
        try:
            out.append((await stub.GetSubmission(spb.GetSubmissionRequest(job_id=f"q{i}"))).submission)
        except grpc.aio.AioRpcError:
            pass
    return out


@pytest.mark.parametrize(("field", "message"), [
    (dict(job_id="a/b"), "job id"),
    (dict(num_gpus=3), "num_gpus 3 is more than the 2 devices"),
    (dict(devices=["d0", "d0"]), "distinct"),
    (dict(global_batch=1), "global_batch 1 must be >= num_gpus 2"),
    (dict(exclusive_samples_per_s=float("nan")), ">= 0"),
])
async def test_a_bad_submission_is_refused_by_name_and_stores_nothing(etcd_endpoint: str, etcd_root: str,
                                                                      field: dict, message: str) -> None:
    cfg = CommonConfig(listen="127.0.0.1:0", etcd=etcd_endpoint, etcd_root=etcd_root, metrics_addr="127.0.0.1:1")
    sched = await start_replica(cfg, GPUFAIR)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{sched.server.port}") as ch:
            stub = spb_grpc.SchedulerServiceStub(ch)
            good = dict(job_id="ok", num_gpus=2, node="n", devices=["d0", "d1"], global_batch=8)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.SubmitJob(spb.SubmitJobRequest(submission=spb.Submission(**{**good, **field})))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in err.value.details()
            job = field.get("job_id", "ok")
            if "/" not in job:
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.GetSubmission(spb.GetSubmissionRequest(job_id=job))
                assert err.value.code() == grpc.StatusCode.NOT_FOUND
            await stub.SubmitJob(spb.SubmitJobRequest(submission=spb.Submission(**good)))
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.SubmitJob(spb.SubmitJobRequest(submission=spb.Submission(**good)))
            assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    finally:
        await sched.close(0)


async def test_a_submission_is_placed_at_once_not_at_the_end_of_the_period(etcd_endpoint: str, etcd_root: str) -> None:
    metrics, _ = await start_metrics(CommonConfig(listen="127.0.0.1:0"))
    cfg = CommonConfig(listen="127.0.0.1:0", etcd=etcd_endpoint, etcd_root=etcd_root,
                       metrics_addr=f"127.0.0.1:{metrics.port}")
    sched = await start_replica(cfg, PolicySettings("sd-maxmin", 60.0, 0.05, "sd", "sd", "paced"))
    try:
        deadline = asyncio.get_running_loop().time() + 30
        while sched.loop.rounds < 1:  # the round at start-up; the next is 60 s away
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{sched.server.port}") as ch:
            stub = spb_grpc.SchedulerServiceStub(ch)
            await stub.SubmitJob(spb.SubmitJobRequest(submission=spb.Submission(
                job_id="now", num_gpus=1, node="n", devices=["d0"], global_batch=8)))
            deadline = asyncio.get_running_loop().time() + 20
            while not (await stub.GetSubmission(spb.GetSubmissionRequest(job_id="now"))).submission.placed_devices:
                assert asyncio.get_running_loop().time() < deadline, "not placed before the period ended"
                await asyncio.sleep(0.1)
            # A withdrawal starts a round at once too: its GPUs and queue place go to the others.
            rounds = sched.loop.rounds
            assert (await stub.WithdrawSubmission(spb.WithdrawSubmissionRequest(job_id="now"))).withdrawn
            deadline = asyncio.get_running_loop().time() + 20
            while sched.loop.rounds == rounds:
                assert asyncio.get_running_loop().time() < deadline, "no round before the period ended"
                await asyncio.sleep(0.05)
    finally:
        await sched.close(0)
        await metrics.stop(0)


async def test_a_failing_command_exits_with_its_own_code_and_leaves_no_submission(
        tmp_path: Path, etcd_endpoint: str, etcd_root: str) -> None:
    """Its trainers fail before they register: submit exits with their exit code, shows
    their error but not torchrun's traceback, and withdraws the submission (which
    would otherwise hold its GPU until the scheduler's TTL)."""
    metrics, sched, _, env = await _stack(etcd_endpoint, etcd_root, tmp_path, 2, GPUFAIR)
    try:
        script = tmp_path / "fails.py"
        script.write_text("import sys\nprint('no such dataset', file=sys.stderr)\nsys.exit(3)\n")
        proc = subprocess.Popen([sys.executable, "-m", "gpufair.client.cli.main", "submit", "--gpus", "1", "--job", "bad",
                                 "--", str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out, _ = await asyncio.to_thread(proc.communicate, timeout=120)
        assert proc.returncode == 3, out
        assert "no such dataset" in out and "failed on local rank 0 with exit code 3" in out, out
        assert "Traceback" not in out and "ChildFailedError" not in out, out
        async with grpc.aio.insecure_channel(f"127.0.0.1:{sched.server.port}") as ch:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await spb_grpc.SchedulerServiceStub(ch).GetSubmission(spb.GetSubmissionRequest(job_id="bad"))
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        await sched.close(0)
        await metrics.stop(0)


async def test_ctrl_c_withdraws_the_job_and_stops_its_trainers(tmp_path: Path, etcd_endpoint: str, etcd_root: str) -> None:
    """Ctrl-C on a running `gpufair submit`: exit 130, the job ends as removed, none of
    its trainers is left, and torchrun's own traceback is not shown."""
    metrics, sched, _, env = await _stack(etcd_endpoint, etcd_root, tmp_path, 2, GPUFAIR)
    marker = tmp_path / "ctrlc-trainer.py"  # a path only this test's trainers run
    marker.write_text(EXAMPLE.read_text())
    try:
        proc = subprocess.Popen([sys.executable, "-m", "gpufair.client.cli.main", "submit", "--gpus", "2", "--job", "cc",
                                 "--", str(marker), "--global-batch", "32", "--epochs", "50", "--log-every", "0",
                                 "--emu-ms-per-sample", "1"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{sched.server.port}") as ch:
            stub = spb_grpc.SchedulerServiceStub(ch)
            deadline = time.monotonic() + 120
            while not [j for j in (await stub.ListJobs(spb.ListJobsRequest())).jobs if j.spec.job_id == "cc" and j.progress > 0]:
                assert time.monotonic() < deadline and proc.poll() is None, "the job never started"
                await asyncio.sleep(0.2)
            proc.send_signal(signal.SIGINT)
            out, _ = await asyncio.to_thread(proc.communicate, timeout=60)
            assert proc.returncode == 130, out
            assert "interrupted: withdrawing cc" in out and "Traceback" not in out, out
            ended = {j.spec.job_id: j.state for j in (await stub.ListJobs(spb.ListJobsRequest(include_finished=True))).jobs}
            assert ended.get("cc") == spb.JOB_STATE_REMOVED, ended
        left = subprocess.run(["pgrep", "-f", str(marker)], capture_output=True, text=True)
        assert not left.stdout.strip(), left.stdout
    finally:
        await sched.close(0)
        await metrics.stop(0)
