"""Authentication and authorisation: refused callers change nothing."""

from __future__ import annotations

import grpc
import pytest

from gpufair.api.metrics.v1 import metrics_service_pb2 as mpb
from gpufair.api.metrics.v1 import metrics_service_pb2_grpc as mpb_grpc
from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from gpufair.common.auth import auth_interceptors
from gpufair.common.config import AuthConfig, CommonConfig
from gpufair.metrics.app import start as start_metrics
from gpufair.scheduler.app import start_replica
from gpufair.scheduler.sources import PolicySettings

ADMIN = "admin-secret-token"


def _bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def _spec(job: str) -> pb.JobSpec:
    return pb.JobSpec(job_id=job, model="m", global_batch=8, total_samples=800,
                      ranks=[pb.RankPlacement(rank=i, node="n", device_id=f"{job}-g{i}") for i in range(2)])


def _config(etcd: str = "127.0.0.1:1", root: str = "/x", open_reads: bool = True) -> CommonConfig:
    return CommonConfig(listen="127.0.0.1:0", etcd=etcd, etcd_root=root, metrics_addr="127.0.0.1:1",
                        auth=AuthConfig(admin_token=ADMIN, job_token_secret="job-secret", open_reads=open_reads))


@pytest.fixture
async def scheduler(etcd_endpoint: str, etcd_root: str):
    cfg = _config(etcd_endpoint, etcd_root)
    replica = await start_replica(cfg, PolicySettings("even", 1.0, 0.05), interceptors=auth_interceptors(cfg))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{replica.server.port}") as ch:
        yield pb_grpc.SchedulerServiceStub(ch)
    await replica.close()


async def _code(call) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    return err.value.code()


async def test_mutations_need_a_valid_token_and_refusals_change_nothing(scheduler) -> None:
    assert await _code(scheduler.RegisterJob(pb.RegisterJobRequest(spec=_spec("job-a")))) == grpc.StatusCode.UNAUTHENTICATED
    assert await _code(scheduler.RegisterJob(pb.RegisterJobRequest(spec=_spec("job-a")), metadata=_bearer("guess"))) == grpc.StatusCode.UNAUTHENTICATED
    assert (await scheduler.ListJobs(pb.ListJobsRequest())).jobs == []  # open reads, nothing was registered
    res = await scheduler.RegisterJob(pb.RegisterJobRequest(spec=_spec("job-a")), metadata=_bearer(ADMIN))
    token_a = res.job_token
    assert token_a.startswith("job.job-a.")
    await scheduler.RegisterJob(pb.RegisterJobRequest(spec=_spec("job-b")), metadata=_bearer(ADMIN))
    before = await scheduler.GetPolicy(pb.GetPolicyRequest())
    # A job's token is not an admin token ...
    assert await _code(scheduler.SetPolicy(pb.SetPolicyRequest(policy=pb.PolicyConfig(name="balance")), metadata=_bearer(token_a))) == grpc.StatusCode.PERMISSION_DENIED
    assert await _code(scheduler.PinSplit(pb.PinSplitRequest(job_id="job-a", batch_sizes=[7, 1]), metadata=_bearer(token_a))) == grpc.StatusCode.PERMISSION_DENIED
    profile = pb.Profile(model="m", device_type="cpu", fit=pb.StepTimeFit(a_s=0.01, c_s=0.001))
    assert await _code(scheduler.PutProfile(pb.PutProfileRequest(profile=profile), metadata=_bearer(token_a))) == grpc.StatusCode.PERMISSION_DENIED
    assert await _code(scheduler.GetProfile(pb.GetProfileRequest(model="m", device_type="cpu"))) == grpc.StatusCode.NOT_FOUND  # open read
    # ... and cannot touch another job.
    assert await _code(scheduler.DeregisterJob(pb.DeregisterJobRequest(job_id="job-b"), metadata=_bearer(token_a))) == grpc.StatusCode.PERMISSION_DENIED

    async def first_command(job: str):
        async for msg in scheduler.StreamCommands(pb.StreamCommandsRequest(job_id=job, rank=0), metadata=_bearer(token_a)):
            return msg

    assert await _code(first_command("job-b")) == grpc.StatusCode.PERMISSION_DENIED
    assert (await first_command("job-a")).command.job_id == "job-a"  # its own job works
    assert (await scheduler.GetPolicy(pb.GetPolicyRequest())).policy == before.policy
    jobs = {j.spec.job_id: list(j.split.batch_sizes) for j in (await scheduler.ListJobs(pb.ListJobsRequest())).jobs}
    assert jobs == {"job-a": [4, 4], "job-b": [4, 4]}
    assert (await scheduler.DeregisterJob(pb.DeregisterJobRequest(job_id="job-a"), metadata=_bearer(token_a))).ended
    # Removing a job is an operator's act: a job token may end its own job, not remove or purge it.
    assert await _code(scheduler.RemoveJob(pb.RemoveJobRequest(job_id="job-a"), metadata=_bearer(token_a))) == grpc.StatusCode.PERMISSION_DENIED


async def test_reads_can_be_closed_to_anonymous_callers(etcd_endpoint: str, etcd_root: str) -> None:
    cfg = _config(etcd_endpoint, etcd_root, open_reads=False)
    replica = await start_replica(cfg, PolicySettings("even", 1.0, 0.05), interceptors=auth_interceptors(cfg))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{replica.server.port}") as ch:
            stub = pb_grpc.SchedulerServiceStub(ch)
            assert await _code(stub.ListJobs(pb.ListJobsRequest())) == grpc.StatusCode.UNAUTHENTICATED
            assert (await stub.ListJobs(pb.ListJobsRequest(), metadata=_bearer(ADMIN))).jobs == []
    finally:
        await replica.close()


async def test_a_job_token_cannot_report_telemetry_for_another_job() -> None:
    cfg = _config()
    running, store = await start_metrics(cfg, interceptors=auth_interceptors(cfg))
    from gpufair.common.tokens import JobTokens

    token_a = JobTokens("job-secret").issue("job-a")
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            stub = mpb_grpc.MetricsServiceStub(ch)
            rec = [mpb.StepRecord(step=0, local_batch=4, compute_s=0.1, samples_total=4, steps_total=1, unix_time_s=1.0)]
            ok = [a async for a in stub.ReportTelemetry(iter([mpb.ReportTelemetryRequest(job_id="job-a", rank=0, records=rec)]), metadata=_bearer(token_a))]
            assert ok[0].accepted == 1

            async def forged():
                return [a async for a in stub.ReportTelemetry(iter([mpb.ReportTelemetryRequest(job_id="job-b", rank=0, records=rec)]), metadata=_bearer(token_a))]

            assert await _code(forged()) == grpc.StatusCode.PERMISSION_DENIED
            assert store.job_ids() == ["job-a"]
    finally:
        await running.stop(0)


async def test_cache_reads_that_spend_s3_credentials_need_a_token(tmp_path, s3_server, etcd_endpoint: str, etcd_root: str) -> None:
    from gpufair.api.cache.v1 import cache_service_pb2 as cpb
    from gpufair.api.cache.v1 import cache_service_pb2_grpc as cpb_grpc
    from gpufair.cache.app import start_node
    from gpufair.cache.node.config import NodeCacheConfig
    from gpufair.common.tokens import JobTokens

    cfg = _config(etcd_endpoint, etcd_root)
    node_cfg = NodeCacheConfig(cache_dir=tmp_path / "cache", capacity_bytes=1 << 20, node="n1", s3_endpoint=s3_server.endpoint,
                               s3_access_key=s3_server.access_key, s3_secret_key=s3_server.secret_key)
    node = await start_node(cfg, node_cfg, interceptors=auth_interceptors(cfg))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{node.server.port}") as ch:
            stub = cpb_grpc.CacheServiceStub(ch)
            req = cpb.ResolveRequest(uri="s3://some-bucket/secret.bin", fetch=True)
            assert await _code(stub.Resolve(req)) == grpc.StatusCode.UNAUTHENTICATED

            async def read_anonymously():
                return [c async for c in stub.ReadObject(cpb.ReadObjectRequest(uri="s3://some-bucket/secret.bin"))]

            assert await _code(read_anonymously()) == grpc.StatusCode.UNAUTHENTICATED
            assert node.cache.list() == []  # nothing was fetched on the anonymous caller's behalf
            assert (await stub.ListEntries(cpb.ListEntriesRequest())).entries == []  # plain reads stay open
            token = JobTokens("job-secret").issue("any-job")
            entry = (await stub.Resolve(req, metadata=_bearer(token))).entry  # through auth: the cache answers
            assert entry.uri == "s3://some-bucket/secret.bin"
    finally:
        await node.close()


def test_every_rpc_has_an_access_class() -> None:
    from gpufair.api.cache.v1 import cache_service_pb2 as cpb
    from gpufair.common.auth import ACCESS

    methods = {f"/{svc.full_name}/{m.name}" for mod in (mpb, pb, cpb) for svc in mod.DESCRIPTOR.services_by_name.values()
               for m in svc.methods}
    assert methods == set(ACCESS)  # a new RPC is classified on purpose, not denied by accident
