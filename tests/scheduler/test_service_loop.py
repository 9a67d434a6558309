"""The scheduler service end to end: real etcd, a real metrics service, trainers simulated over gRPC."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from gpufair.api.metrics.v1 import metrics_service_pb2 as mpb
from gpufair.api.metrics.v1 import metrics_service_pb2_grpc as mpb_grpc
from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from gpufair.common.config import CommonConfig
from gpufair.metrics.app import start as start_metrics
from gpufair.scheduler.app import start_replica
from gpufair.scheduler.sources import PolicySettings

pytestmark = pytest.mark.timeout(120)


def _spec(job: str, devices: list[str], batch: int) -> pb.JobSpec:
    return pb.JobSpec(job_id=job, model="resnet-small", global_batch=batch, total_samples=10**7,
                      ranks=[pb.RankPlacement(rank=i, node="n1", device_id=d, device_type="emu") for i, d in enumerate(devices)])


class FakeTrainer:
    """Streams telemetry at a fixed per-sample cost and follows split commands."""

    def __init__(self, metrics_addr: str, sched_addr: str, job: str, ranks: list[str], batch: int) -> None:
        self.job, self.devices, self.batch = job, ranks, batch
        self.split = [batch // len(ranks)] * len(ranks)
        self.versions: list[int] = []
        self._metrics_addr, self._sched_addr = metrics_addr, sched_addr
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._follow(r)) for r in range(len(self.devices))] + [asyncio.create_task(self._report())]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def retarget(self, sched_addr: str) -> None:
        self._sched_addr = sched_addr

    async def _follow(self, rank: int) -> None:
        known = 0
        while True:
            try:
                async with grpc.aio.insecure_channel(self._sched_addr) as ch:
                    stub = pb_grpc.SchedulerServiceStub(ch)
                    async for msg in stub.StreamCommands(pb.StreamCommandsRequest(job_id=self.job, rank=rank, known_version=known)):
                        c = msg.command
                        assert c.version >= known, "a command stream went backwards"  # the current one comes first
                        if rank == 0 and c.version > known:
                            self.versions.append(c.version)
                            self.split = list(c.batch_sizes)
                        known = c.version
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.1)  # replica gone: reconnect (maybe to another)

    async def _report(self) -> None:
        step, t0 = 0, time.time()
        async with grpc.aio.insecure_channel(self._metrics_addr) as ch:
            stub = mpb_grpc.MetricsServiceStub(ch)

            async def batches():
                nonlocal step
                while True:
                    await asyncio.sleep(0.05)
                    step += 1
                    for rank, b in enumerate(self.split):
                        yield mpb.ReportTelemetryRequest(
                            job_id=self.job, rank=rank, node="n1", device_id=self.devices[rank], global_batch=self.batch,
                            total_samples=10**7, records=[mpb.StepRecord(step=step, local_batch=b, compute_s=0.001 * b,
                                                                         samples_total=step * b, steps_total=step,
                                                                         unix_time_s=t0 + step * 0.05)])

            async for _ in stub.ReportTelemetry(batches()):
                pass


async def _until(pred, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def test_splits_move_off_the_shared_gpu_converge_and_survive_a_leader_kill(etcd_endpoint: str, etcd_root: str) -> None:
    metrics, _ = await start_metrics(CommonConfig(listen="127.0.0.1:0"))
    maddr = f"127.0.0.1:{metrics.port}"
    cfg = CommonConfig(listen="127.0.0.1:0", etcd=etcd_endpoint, etcd_root=etcd_root, metrics_addr=maddr, lease_ttl=2)
    policy = PolicySettings("sd-maxmin", 0.2, 0.02)
    a = await start_replica(cfg, policy, identity="replica-a")
    assert await a.election.wait_leader(10)
    b = await start_replica(cfg, policy, identity="replica-b")
    trainers = []
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{a.server.port}") as ch:
            stub = pb_grpc.SchedulerServiceStub(ch)
            # job-a spans gpu-0 and gpu-1; job-b sits alone on gpu-1, so gpu-1 is contended.
            await stub.RegisterJob(pb.RegisterJobRequest(spec=_spec("job-a", ["gpu-0", "gpu-1"], 64)))
            await stub.RegisterJob(pb.RegisterJobRequest(spec=_spec("job-b", ["gpu-1"], 32)))
            for job, devs, batch in [("job-a", ["gpu-0", "gpu-1"], 64), ("job-b", ["gpu-1"], 32)]:
                t = FakeTrainer(maddr, f"127.0.0.1:{b.server.port}", job, devs, batch)
                t.start()
                trainers.append(t)
            ta = trainers[0]
            await _until(lambda: ta.split[0] > ta.split[1], 20)
            assert sum(ta.split) == 64 and min(ta.split) >= 1
            # Converged: with steady inputs, five more decision rounds issue no new version
            # (after letting a few rounds absorb the first re-split's own effect on the rates).
            r0 = a.loop.rounds
            await _until(lambda: a.loop.rounds >= r0 + 5, 20)
            settled, r1 = list(ta.versions), a.loop.rounds
            await _until(lambda: a.loop.rounds >= r1 + 5, 20)
            assert ta.versions == settled, "splits kept changing on steady inputs"
            explain = await stub.ExplainDecision(pb.ExplainDecisionRequest(job_id="job-a"))
            assert explain.decision.policy == "sd-maxmin" and explain.decision.jobs[0].explanation
            jobs = (await stub.ListJobs(pb.ListJobsRequest())).jobs
            assert {j.spec.job_id: j.live_ranks for j in jobs} == {"job-a": 2, "job-b": 1}
            assert all(j.slowdown > 0 for j in jobs)
            history = (await stub.GetJob(pb.GetJobRequest(job_id="job-a"))).history
            assert [h.split.version for h in history] == sorted((h.split.version for h in history), reverse=True)
        # Kill the leader as a crash would: its lease stops being refreshed.
        a.state._keepalive.cancel()  # noqa: SLF001
        await a.loop.stop()
        a.election._task.cancel()  # noqa: SLF001 - the crashed leader campaigns no more
        assert await b.election.wait_leader(2 + 4), "standby did not take over within the lease TTL"
        async with grpc.aio.insecure_channel(f"127.0.0.1:{b.server.port}") as ch:
            stub = pb_grpc.SchedulerServiceStub(ch)
            before = max(ta.versions)
            await stub.PinSplit(pb.PinSplitRequest(job_id="job-a", batch_sizes=[8, 56]))
            await _until(lambda: ta.split == [8, 56], 10)
            assert max(ta.versions) > before
            await stub.ReleaseSplit(pb.ReleaseSplitRequest(job_id="job-a"))
            await _until(lambda: ta.split[0] > ta.split[1], 20)  # the new leader re-splits
            assert ta.versions == sorted(ta.versions) and len(set(ta.versions)) == len(ta.versions)
    finally:
        for t in trainers:
            await t.stop()
        await b.close()
        await a.close()
        await metrics.stop(0)


async def test_bad_registrations_and_unknown_jobs_get_clear_statuses(etcd_endpoint: str, etcd_root: str) -> None:
    cfg = CommonConfig(listen="127.0.0.1:0", etcd=etcd_endpoint, etcd_root=etcd_root, metrics_addr="127.0.0.1:1")
    r = await start_replica(cfg, PolicySettings("even", 1.0, 0.05))
    try:
        # Until the registry's first read a lookup answers UNAVAILABLE ("retry"), not NOT_FOUND.
        assert await r.registry.wait_ready()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{r.server.port}") as ch:
            stub = pb_grpc.SchedulerServiceStub(ch)
            cases = [
                (_spec("../etc", ["g0"], 8), "job_id"),
                (_spec("j1", ["g0", "g0"], 8), "same device"),
                (_spec("j1", ["g0", "g1"], 1), "global_batch"),
                (pb.JobSpec(job_id="j1", model="m", global_batch=8, total_samples=0, ranks=[pb.RankPlacement(rank=0, device_id="g")]), "total_samples"),
            ]
            for spec, words in cases:
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.RegisterJob(pb.RegisterJobRequest(spec=spec))
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and words in err.value.details()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.GetJob(pb.GetJobRequest(job_id="nope"))
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
            await stub.RegisterJob(pb.RegisterJobRequest(spec=_spec("j2", ["g0", "g1"], 8)))
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.PinSplit(pb.PinSplitRequest(job_id="j2", batch_sizes=[4, 5]))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "sum" in err.value.details()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.SetPolicy(pb.SetPolicyRequest(policy=pb.PolicyConfig(name="fastest")))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "sd-maxmin" in err.value.details()
            job = (await stub.GetJob(pb.GetJobRequest(job_id="j2"))).job
            assert list(job.split.batch_sizes) == [4, 4] and not job.pinned
    finally:
        await r.close()
