"""kill -9 each service under a real 2-rank gloo job: training goes on, state recovers, splits never go backwards."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import grpc
import pytest

from gpufair.api.metrics.v1 import metrics_service_pb2 as mpb
from gpufair.api.metrics.v1 import metrics_service_pb2_grpc as mpb_grpc
from gpufair.api.scheduler.v1 import scheduler_service_pb2 as spb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as spb_grpc
from gpufair.common.etcd import EtcdState
from gpufair.common.keys import Keys
from gpufair.local import S3Server
from gpufair.local.launch import LocalJob, launch
from fault_support import PACED_TRAINER, SERVING, Service, health_status, read_command_logs, service_env, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

JOB, BATCH, DATASET = "fault-job", 32, 12288  # 384 steps: long enough to kill three services under it
TTL = 3


async def _stats(addr: str) -> mpb.JobStats | None:
    try:
        async with grpc.aio.insecure_channel(addr) as ch:
            return (await mpb_grpc.MetricsServiceStub(ch).GetJobStats(mpb.GetJobStatsRequest(job_id=JOB), timeout=2)).stats
    except grpc.aio.AioRpcError:
        return None


async def _leader_pid(state: EtcdState, keys: Keys) -> int | None:
    stored = await state.get(keys.leader())
    # Identity is <node>-<pid>-<random>.
    return None if stored is None else int(str(stored.value["identity"]).rsplit("-", 2)[1])


def _assert_alive(job: LocalJob, when: str) -> None:
    assert job.alive(), f"the job finished before {when}; make it longer\n{job.logs()}"


async def test_training_survives_kill_9_of_every_service(tmp_path: Path, etcd_endpoint: str, etcd_root: str) -> None:
    s3 = S3Server(workdir=tmp_path / "s3").start()
    env = service_env(etcd_endpoint, etcd_root, tmp_path, GPUFAIR_S3_ENDPOINT=s3.endpoint, GPUFAIR_S3_ACCESS_KEY=s3.access_key,
                      GPUFAIR_S3_SECRET_KEY=s3.secret_key, GPUFAIR_POLICY="even")
    metrics = Service("gpufair.metrics", env, tmp_path / "metrics.log").start()
    env["GPUFAIR_METRICS_ADDR"] = metrics.addr
    sched_a = Service("gpufair.scheduler", env, tmp_path / "sched-a.log").start()
    state, keys = EtcdState(etcd_endpoint), Keys(etcd_root)
    services = [metrics, sched_a]
    job = None
    try:
        await until(lambda: _is(_leader_pid(state, keys), sched_a.pid), 15, "replica A leads")
        sched_b = Service("gpufair.scheduler", env, tmp_path / "sched-b.log").start()
        cache = Service("gpufair.cache", env, tmp_path / "cache.log").start()
        services += [sched_b, cache]
        # Trainers follow the standby, so the leader's death does not cut their stream.
        trainer_env = dict(env, GPUFAIR_METRICS_ADDR=metrics.addr, GPUFAIR_SCHEDULER_ADDR=sched_b.addr, GPUFAIR_CACHE_ADDR=cache.addr,
                           FAULT_STEP_S="0.1", FAULT_COMMANDS_LOG=str(tmp_path / "cmds"))
        job = launch(JOB, [str(PACED_TRAINER), "--job", JOB, "--global-batch", str(BATCH), "--epochs", "1", "--dataset-size",
                           str(DATASET), "--hidden", "32", "--stats-out", str(tmp_path / JOB)], 2, tmp_path, trainer_env)

        # 1. metrics: kill -9 mid-run, restart on the same port, cumulative counters make progress right again.
        await until(lambda: _steps_at_least(metrics.addr, 20), 60, "telemetry arrives")
        before = (await _stats(metrics.addr)).steps_done
        metrics.kill9()
        _assert_alive(job, "the metrics restart")
        await asyncio.sleep(1.0)  # an outage the reporters must ride out, not a condition to wait for
        metrics.start()
        await until(lambda: _steps_at_least(metrics.addr, before + 5), 30, "progress after the metrics restart")
        restarted = await _stats(metrics.addr)
        assert restarted.progress == pytest.approx(restarted.steps_done * BATCH / DATASET, rel=1e-6)

        # 2. the scheduler leader: the standby takes over within the lease TTL, splits keep going forward.
        _assert_alive(job, "the leader kill")
        sched_a.kill9()
        took = await until(lambda: _is(_leader_pid(state, keys), sched_b.pid), TTL + 3, "standby B takes over")
        assert took <= TTL + 2
        async with grpc.aio.insecure_channel(sched_b.addr) as ch:
            stub = spb_grpc.SchedulerServiceStub(ch)
            pinned = (await stub.PinSplit(spb.PinSplitRequest(job_id=JOB, batch_sizes=[20, 12]))).split.version
            await until(lambda: _ranks_got(tmp_path / "cmds", pinned), 20, "both ranks receive the pinned split")
            await stub.ReleaseSplit(spb.ReleaseSplitRequest(job_id=JOB))
            listed = {j.spec.job_id: j for j in (await stub.ListJobs(spb.ListJobsRequest())).jobs}
            assert listed[JOB].live_ranks == 2
            assert (await stub.ExplainDecision(spb.ExplainDecisionRequest())).decision.decided_unix_s > time.time() - 10

        # 3. the cache: kill -9 and restart; the trainers never notice, the node is live again.
        _assert_alive(job, "the cache kill")
        cache.kill9()
        cache.start()
        await until(lambda: _is(health_status(cache.addr), SERVING), 30, "restarted cache SERVING")

        codes = await asyncio.to_thread(job.wait, 150)
        assert codes == [0, 0], job.logs()
        mine = [json.loads((tmp_path / f"{JOB}.rank{r}.json").read_text()) for r in range(2)]
        await until(lambda: _steps_at_least(metrics.addr, mine[0]["steps"]), 10, "the last telemetry")
        final = await _stats(metrics.addr)
        assert final.steps_done == mine[0]["steps"] == DATASET // BATCH
        assert final.samples_done == sum(m["samples"] for m in mine) == DATASET
        assert final.progress == pytest.approx(1.0)
        for log in read_command_logs(tmp_path / "cmds", 2):
            versions = [c["version"] for c in log]
            assert versions == sorted(set(versions)), f"a rank saw split versions go backwards: {versions}"
            assert pinned in versions
    finally:
        if job is not None:
            job.kill()
        for s in reversed(services):
            s.stop()
        await state.close()
        s3.close()


async def _is(value_aw, expected) -> bool:  # type: ignore[no-untyped-def]
    return (await value_aw) == expected


async def _steps_at_least(addr: str, n: int) -> bool:
    stats = await _stats(addr)
    return stats is not None and stats.steps_done >= n


async def _ranks_got(prefix: Path, version: int) -> bool:
    return all(any(c["version"] == version for c in log) for log in read_command_logs(prefix, 2))
