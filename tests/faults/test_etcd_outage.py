"""etcd stops for a while and comes back: NOT_SERVING meanwhile, last good state served, recovery by itself."""

from __future__ import annotations

import io
import logging
import time
import uuid
from pathlib import Path

import grpc
import pytest

from gpufair.api.cache.v1 import cache_service_pb2 as cpb
from gpufair.api.cache.v1 import cache_service_pb2_grpc as cpb_grpc
from gpufair.api.scheduler.v1 import scheduler_service_pb2 as spb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as spb_grpc
from gpufair.cache.app import start_node
from gpufair.cache.node.config import NodeCacheConfig
from gpufair.common.config import CommonConfig
from gpufair.local import EtcdServer
from gpufair.metrics.app import start as start_metrics
from gpufair.scheduler.app import start_replica
from gpufair.scheduler.sources import PolicySettings
from fault_support import SERVING, health_status, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _spec(job: str) -> spb.JobSpec:
    return spb.JobSpec(job_id=job, model="m", global_batch=32, total_samples=10**6,
                       ranks=[spb.RankPlacement(rank=i, node="n", device_id=f"g{i}", device_type="emu") for i in range(2)])


async def test_services_ride_out_an_etcd_outage(tmp_path: Path, s3_server, s3_client, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpufair")
    etcd = EtcdServer(workdir=tmp_path / "etcd").start()
    bucket = f"outage-{uuid.uuid4().hex[:8]}"
    s3_client.make_bucket(bucket)
    s3_client.put_object(bucket, "d.bin", io.BytesIO(b"z" * 50_000), 50_000)
    uri = f"s3://{bucket}/d.bin"
    common = CommonConfig(listen="127.0.0.1:0", etcd=etcd.endpoint, etcd_root="/outage", lease_ttl=3)
    metrics, _ = await start_metrics(CommonConfig(listen="127.0.0.1:0"))
    sched = await start_replica(CommonConfig(**{**common.__dict__, "metrics_addr": f"127.0.0.1:{metrics.port}"}),
                                PolicySettings("even", 0.3, 0.05))
    cache = await start_node(common, NodeCacheConfig(cache_dir=tmp_path / "cache", capacity_bytes=1 << 20, node="n1",
                                                      s3_endpoint=s3_server.endpoint, s3_access_key=s3_server.access_key,
                                                      s3_secret_key=s3_server.secret_key))
    saddr, caddr = f"127.0.0.1:{sched.server.port}", f"127.0.0.1:{cache.server.port}"
    try:
        async with grpc.aio.insecure_channel(saddr) as sch, grpc.aio.insecure_channel(caddr) as cch:
            sstub, cstub = spb_grpc.SchedulerServiceStub(sch), cpb_grpc.CacheServiceStub(cch)
            for addr in (saddr, caddr):
                await until(lambda: _is(health_status(addr), SERVING), 20, f"{addr} SERVING at start")
            await sstub.RegisterJob(spb.RegisterJobRequest(spec=_spec("j1")))
            pinned = (await sstub.PinSplit(spb.PinSplitRequest(job_id="j1", batch_sizes=[24, 8]))).split
            assert (await cstub.Resolve(cpb.ResolveRequest(uri=uri, wait_s=30))).entry.state == cpb.ENTRY_STATE_CACHED
            await until(lambda: _split_is(sstub, pinned.version), 10, "the mirror has the pinned split")

            etcd.stop()
            for addr in (saddr, caddr):
                await until(lambda: _is_not_serving(addr), 15, f"{addr} NOT_SERVING while etcd is down")
            # Last good state: the scheduler's mirror and the cache's local index still answer.
            listed = (await sstub.ListJobs(spb.ListJobsRequest(), timeout=10)).jobs
            assert [(j.spec.job_id, j.split.version, list(j.split.batch_sizes)) for j in listed] == [("j1", pinned.version, [24, 8])]
            resolved = (await cstub.Resolve(cpb.ResolveRequest(uri=uri), timeout=10)).entry
            assert resolved.state == cpb.ENTRY_STATE_CACHED and Path(resolved.local_path).read_bytes() == b"z" * 50_000
            # A write during the outage is refused as retryable, never half-done.
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await sstub.PinSplit(spb.PinSplitRequest(job_id="j1", batch_sizes=[8, 24]), timeout=20)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE, err.value.details()

            etcd.start()
            for addr in (saddr, caddr):
                await until(lambda: _is(health_status(addr), SERVING), 30, f"{addr} SERVING again after etcd returns")
            job = await sstub.GetJob(spb.GetJobRequest(job_id="j1"), timeout=10)
            assert job.job.split.version == pinned.version and list(job.job.split.batch_sizes) == [24, 8]
            top = job.history[0].split
            assert (top.version, list(top.batch_sizes)) == (pinned.version, [24, 8]), "split and its history disagree"
            since = time.time()
            await until(lambda: _decided_after(sstub, since), 15, "decision rounds resume")
        # The outage logs one line per state change of each etcd client (scheduler, cache): no tracebacks, no ERRORs.
        records = [r for r in caplog.records if r.name.startswith("gpufair")]
        assert not [r for r in records if r.levelno >= logging.ERROR or r.exc_info], [r.getMessage() for r in records][-20:]
        lost = [r for r in records if "is unreachable" in r.getMessage() and r.name == "gpufair.common.etcd"]
        back = [r for r in records if "answers again" in r.getMessage()]
        assert 1 <= len(lost) <= 2 and len(back) == len(lost), [r.getMessage() for r in records]
    finally:
        await cache.close()
        await sched.close()
        await metrics.stop(0)
        etcd.close()


async def _is(value_aw, expected) -> bool:  # type: ignore[no-untyped-def]
    return (await value_aw) == expected


async def _is_not_serving(addr: str) -> bool:
    status = await health_status(addr)
    return status is not None and status != SERVING


async def _split_is(stub: spb_grpc.SchedulerServiceStub, version: int) -> bool:
    return (await stub.GetJob(spb.GetJobRequest(job_id="j1"))).job.split.version == version


async def _decided_after(stub: spb_grpc.SchedulerServiceStub, t: float) -> bool:
    return (await stub.ExplainDecision(spb.ExplainDecisionRequest())).decision.decided_unix_s > t
