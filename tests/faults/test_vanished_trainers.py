"""A job whose processes are killed -9 leaves the member list and the next decision round; the others go on."""

from __future__ import annotations

import os
import time
from pathlib import Path

import grpc
import pytest

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as spb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as spb_grpc
from gpufair.common.config import CommonConfig
from gpufair.local.launch import launch
from gpufair.metrics.app import start as start_metrics
from gpufair.scheduler.app import start_replica
from gpufair.scheduler.sources import PolicySettings
from fault_support import PACED_TRAINER, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]
TTL = 2


async def _live(stub: spb_grpc.SchedulerServiceStub) -> dict[str, int]:
    return {j.spec.job_id: j.live_ranks for j in (await stub.ListJobs(spb.ListJobsRequest(include_finished=True))).jobs}


async def _decided(stub: spb_grpc.SchedulerServiceStub, job: str, after: float = 0.0) -> bool:
    try:
        d = (await stub.ExplainDecision(spb.ExplainDecisionRequest(job_id=job))).decision
    except grpc.aio.AioRpcError as exc:
        assert exc.code() == grpc.StatusCode.NOT_FOUND, exc.details()
        return False
    return d.decided_unix_s > after


async def test_killed_job_leaves_members_and_decisions(tmp_path: Path, etcd_endpoint: str, etcd_root: str) -> None:
    metrics, _ = await start_metrics(CommonConfig(listen="127.0.0.1:0"))
    maddr = f"127.0.0.1:{metrics.port}"
    sched = await start_replica(CommonConfig(listen="127.0.0.1:0", etcd=etcd_endpoint, etcd_root=etcd_root, metrics_addr=maddr, lease_ttl=TTL),
                                PolicySettings("sd-maxmin", 0.3, 0.02))
    saddr = f"127.0.0.1:{sched.server.port}"
    # One node name for both jobs: rank 0 of each sits on device cpu-shared-0, so they share it.
    env = dict(os.environ, GPUFAIR_METRICS_ADDR=maddr, GPUFAIR_SCHEDULER_ADDR=saddr, GPUFAIR_NODE="shared", FAULT_STEP_S="0.05")
    args = ["--global-batch", "32", "--epochs", "1", "--dataset-size", "65536", "--hidden", "32"]
    stay = launch("stay", [str(PACED_TRAINER), "--job", "stay", *args], 2, tmp_path, env)
    gone = launch("gone", [str(PACED_TRAINER), "--job", "gone", *args], 1, tmp_path, env)
    try:
        async with grpc.aio.insecure_channel(saddr) as ch:
            stub = spb_grpc.SchedulerServiceStub(ch)
            await until(lambda: _all_live(stub), 60, "both jobs' ranks are live members")
            await until(lambda: _both_decided(stub), 60, "both jobs are part of one decision round")

            gone.kill()  # SIGKILL to every process of the job: no goodbye, no deregistration
            t_kill = time.time()
            took = await until(lambda: _members_gone(stub), TTL + 5, "the killed job's member keys disappear")
            assert took <= TTL + 3
            t_gone = time.time()
            # The next round leaves it out: its device counts as free for the job that stayed.
            await until(lambda: _decided(stub, "stay", after=t_gone), 20, "a decision round after the kill")
            assert not await _decided(stub, "gone"), "a job without live ranks was still part of the decision"
            listed = {j.spec.job_id: j for j in (await stub.ListJobs(spb.ListJobsRequest(include_finished=True))).jobs}
            assert listed["gone"].live_ranks == 0 and listed["stay"].live_ranks == 2
            assert stay.alive(), stay.logs()
            assert t_kill <= t_gone
    finally:
        gone.kill()
        stay.kill()
        await sched.close()
        await metrics.stop(0)


async def _all_live(stub: spb_grpc.SchedulerServiceStub) -> bool:
    return await _live(stub) == {"stay": 2, "gone": 1}


async def _both_decided(stub: spb_grpc.SchedulerServiceStub) -> bool:
    return await _decided(stub, "gone") and await _decided(stub, "stay")


async def _members_gone(stub: spb_grpc.SchedulerServiceStub) -> bool:
    return (await _live(stub)).get("gone") == 0
