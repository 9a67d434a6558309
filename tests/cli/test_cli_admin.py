"""The admin CLI against live services: tables, JSON, and exit codes scripts can trust."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import grpc

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from gpufair.client.cli.admin import STALL_S, _rate, _share, _state
from gpufair.common.config import CommonConfig
from gpufair.local import free_port
from gpufair.metrics.app import start as start_metrics
from gpufair.scheduler.app import start_replica
from gpufair.scheduler.sources import PolicySettings


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpufair.client.cli", *args], env=env, capture_output=True, text=True, timeout=60)


async def test_admin_commands_round_trip_and_exit_codes(etcd_endpoint: str, etcd_root: str) -> None:
    metrics, _ = await start_metrics(CommonConfig(listen="127.0.0.1:0"))
    cfg = CommonConfig(listen="127.0.0.1:0", etcd=etcd_endpoint, etcd_root=etcd_root, metrics_addr=f"127.0.0.1:{metrics.port}")
    sched = await start_replica(cfg, PolicySettings("even", 1.0, 0.05))
    env = dict(os.environ, GPUFAIR_SCHEDULER_ADDR=f"127.0.0.1:{sched.server.port}", GPUFAIR_METRICS_ADDR=f"127.0.0.1:{metrics.port}",
               GPUFAIR_ETCD=etcd_endpoint, GPUFAIR_CACHE_ADDR=f"127.0.0.1:{free_port()}", GPUFAIR_S3_ENDPOINT=f"127.0.0.1:{free_port()}")
    run = lambda *a: asyncio.to_thread(_cli, env, *a)  # noqa: E731
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{sched.server.port}") as ch:
            spec = pb.JobSpec(job_id="job-cli", model="resnet", global_batch=64, total_samples=6400,
                              ranks=[pb.RankPlacement(rank=i, node="n1", device_id=f"g{i}") for i in range(2)])
            await pb_grpc.SchedulerServiceStub(ch).RegisterJob(pb.RegisterJobRequest(spec=spec))
        listed = await run("jobs", "--json")
        assert listed.returncode == 0, listed.stderr
        assert [(j["spec"]["job_id"], j["split"]["batch_sizes"]) for j in json.loads(listed.stdout)] == [("job-cli", [32, 32])]
        table = await run("jobs")
        assert "job-cli" in table.stdout and "32/32" in table.stdout
        async with grpc.aio.insecure_channel(f"127.0.0.1:{sched.server.port}") as ch:
            spec = pb.JobSpec(job_id="job-next", model="resnet", global_batch=8, total_samples=800,
                              ranks=[pb.RankPlacement(rank=0, node="n1", device_id="g1")])
            await pb_grpc.SchedulerServiceStub(ch).RegisterJob(pb.RegisterJobRequest(spec=spec))
        # Each job's GPUs, who else is on them, its paced share ("-": time-sliced).
        rows = {line.split()[0]: line.split() for line in (await run("jobs")).stdout.splitlines()[1:]}
        assert rows["job-cli"][2:5] == ["g0,g1", "job-next", "-"] and rows["job-next"][2:5] == ["g1", "job-cli", "-"]
        pinned = await run("split", "pin", "job-cli", "48,16")
        # A split reads as its place in the job's life, not a millisecond timestamp.
        assert pinned.returncode == 0 and "pinned 48/16 as split #2" in pinned.stdout
        history = json.loads((await run("job", "job-cli", "--json")).stdout)
        assert history["job"]["pinned"] and history["history"][0]["split"]["batch_sizes"] == [48, 16]
        assert history["history"][0]["split"]["number"] == 2 and history["history"][1]["split"]["number"] == 1
        assert "#2" in (await run("job", "job-cli")).stdout
        assert (await run("split", "pin", "job-cli", "50,20")).returncode == 2  # wrong sum: the caller's error
        assert (await run("split", "pin", "job-cli", "5,x")).returncode == 2
        # Out-of-range numbers are refused before anything is sent, naming the field and the limit.
        huge = await run("split", "pin", "job-cli", "1000000000000,1")
        assert huge.returncode == 2 and "entry 1" in huge.stderr and "16777216" in huge.stderr and "unexpected" not in huge.stderr
        zero = await run("policy", "set", "even", "--period", "0")
        assert zero.returncode == 2 and "--period" in zero.stderr and "0.05" in zero.stderr
        limit = await run("job", "job-cli", "--limit", "99999999999")
        assert limit.returncode == 2 and "--limit" in limit.stderr and "10,000" in limit.stderr
        assert (await run("job", "no-such-job")).returncode == 2
        changed = await run("policy", "set", "balance", "--json")
        assert changed.returncode == 0 and json.loads(changed.stdout)["policy"]["name"] == "balance"
        assert "policy balance" in (await run("policy", "get")).stdout
        assert (await run("policy", "set", "fastest")).returncode == 2
        status = json.loads((await run("status", "--json", "--timeout", "1")).stdout)
        ok = {c["component"]: c["ok"] for c in status["components"]}
        assert ok == {"etcd": True, "s3": False, "metrics": True, "scheduler": True, "cache": False}
        assert (await run("status")).returncode == 1  # something is down
    finally:
        await sched.close()
        await metrics.stop(0)
    down = await run("jobs")
    assert down.returncode == 1 and "unreachable" in down.stderr and "Traceback" not in down.stderr


def test_a_paced_share_reads_as_percent_or_held() -> None:
    assert _share(()) == "-"  # time-sliced: the GPU divides its time itself
    assert _share((0.0, 0.0)) == "held"
    assert _share((0.5, 1.0)) == "50%/100%"


def test_a_running_job_that_stopped_stepping_reads_as_stalled_unless_held() -> None:
    def job(last_step: float, shares: tuple[float, ...] = (), rate: float = 64.0) -> pb.JobSummary:
        return pb.JobSummary(spec=pb.JobSpec(job_id="j", global_batch=64), state=pb.JOB_STATE_RUNNING,
                             samples_per_s=rate, last_step_unix_s=last_step, split=pb.SplitCommand(shares=list(shares)))

    now = 1000.0
    assert (_state(job(now - 2), now), _rate(job(now - 2), now)) == ("running", "64.0")
    assert (_state(job(now - 95), now), _rate(job(now - 95), now)) == ("running, no step for 1m35s", "0.0")
    assert _state(job(now - 95, shares=(0.0, 0.0)), now) == "running"  # held: not stepping is the plan
    assert _state(job(0.0), now) == "running"  # starting: no step yet
    # A paced job with 20 s steps is not stalled after 60 s, only after five steps.
    assert _state(job(now - 2 * STALL_S, rate=64 / 20), now) == "running"
    assert _state(job(now - 101, rate=64 / 20), now).startswith("running, no step for")
