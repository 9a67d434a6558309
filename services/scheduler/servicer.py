"""SchedulerService: protobuf <-> domain, nothing else."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import grpc

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from gpufair.common.errors import InvalidArgument, NotFound
from gpufair.common.tokens import JobTokens
from gpufair.scheduler.decisions import DecisionRecord
from gpufair.scheduler.hub import CommandHub
from gpufair.scheduler.jobs import JobSpec, Placement, Split, check_job_id, validate_batch_sizes, validate_spec
from gpufair.scheduler.loop import DecisionLoop
from gpufair.scheduler.policy import even_split, policy_names
from gpufair.scheduler.profiles import ProfileStore
from gpufair.scheduler.registry import JobRegistry, JobView
from gpufair.scheduler.snapshot import JobEstimate
from gpufair.scheduler.sources import PolicySettings, PolicyStore

logger = logging.getLogger(__name__)


def spec_from_pb(s: pb.JobSpec) -> JobSpec:
    ranks = tuple(Placement(r.rank, r.node, r.device_id, r.device_type, r.max_batch) for r in s.ranks)
    return validate_spec(JobSpec(s.job_id, s.model, s.global_batch, s.total_samples, ranks, s.exclusive_samples_per_s, s.weight or 1.0))


def spec_to_pb(s: JobSpec) -> pb.JobSpec:
    return pb.JobSpec(job_id=s.job_id, model=s.model, global_batch=s.global_batch, total_samples=s.total_samples,
                      exclusive_samples_per_s=s.exclusive_rate, weight=s.weight,
                      ranks=[pb.RankPlacement(rank=r.rank, node=r.node, device_id=r.device_id, device_type=r.device_type, max_batch=r.max_batch) for r in s.ranks])


def split_to_pb(job: str, s: Split) -> pb.SplitCommand:
    return pb.SplitCommand(job_id=job, version=s.version, apply_step=s.apply_step, batch_sizes=list(s.batch_sizes), policy=s.policy,
                           reason=s.reason, issued_unix_s=s.issued_unix_s)


def job_state(est: JobEstimate | None) -> int:
    if est is None:
        return pb.JOB_STATE_PENDING
    return pb.JOB_STATE_FINISHED if est.progress >= 1 else (pb.JOB_STATE_RUNNING if est.rate > 0 else pb.JOB_STATE_PENDING)


def fill_summary(out: pb.JobSummary, view: JobView, est: JobEstimate | None, forms: "PbForms | None" = None) -> pb.JobSummary:
    """`out` filled with the job's summary (`forms` reuses the protobuf forms of unchanged specs and splits)."""
    forms = forms or PbForms()
    out.spec.CopyFrom(forms.spec(view.spec))
    out.state, out.pinned, out.live_ranks = job_state(est), view.pinned is not None, view.live_ranks
    if view.split:
        out.split.CopyFrom(forms.split(view.spec.job_id, view.split))
    if est:
        out.samples_per_s, out.exclusive_samples_per_s, out.slowdown = est.rate, est.exclusive_rate, est.slowdown
        out.progress, out.elapsed_s, out.exclusive_source = est.progress, est.elapsed_s, est.exclusive_source
    return out


def summary_to_pb(view: JobView, est: JobEstimate | None) -> pb.JobSummary:
    return fill_summary(pb.JobSummary(), view, est)


class PbForms:
    """The protobuf forms of specs and splits, rebuilt only when the registry's
    value changes (its index keeps one object per stored value), so listing
    4,000 jobs does not rebuild 32,000 rank placements every call."""

    def __init__(self) -> None:
        self._specs: dict[str, tuple[JobSpec, pb.JobSpec]] = {}
        self._splits: dict[str, tuple[Split, pb.SplitCommand]] = {}

    def spec(self, s: JobSpec) -> pb.JobSpec:
        hit = self._specs.get(s.job_id)
        if hit is None or hit[0] is not s:
            hit = self._specs[s.job_id] = (s, spec_to_pb(s))
        return hit[1]

    def split(self, job: str, s: Split) -> pb.SplitCommand:
        hit = self._splits.get(job)
        if hit is None or hit[0] is not s:
            hit = self._splits[job] = (s, split_to_pb(job, s))
        return hit[1]

    def keep_only(self, views: list[JobView]) -> None:
        """Forget jobs that are gone."""
        if len(self._specs) > len(views):
            jobs = {v.spec.job_id for v in views}
            self._specs = {j: v for j, v in self._specs.items() if j in jobs}
            self._splits = {j: v for j, v in self._splits.items() if j in jobs}


def policy_to_pb(s: PolicySettings) -> pb.PolicyConfig:
    return pb.PolicyConfig(name=s.name, period_s=s.period_s, min_change=s.min_change)


def decision_to_pb(record: DecisionRecord, job_id: str) -> pb.Decision:
    """The round, or only `job_id`'s part of it (NotFound if it had none)."""
    jobs = [pb.JobDecision(job_id=j.job_id, old_batch_sizes=j.old, new_batch_sizes=j.new, slowdown=j.slowdown,
                           predicted_slowdown=j.predicted_slowdown, changed=j.changed, explanation=j.explanation)
            for j in record.jobs if not job_id or j.job_id == job_id]
    if job_id and not jobs:
        raise NotFound(f"job {job_id!r} was not part of the latest decision round")
    return pb.Decision(policy=record.policy, decided_unix_s=record.decided_unix_s, duration_s=record.duration_s,
                       summary=record.summary, jobs=jobs)


class SchedulerServicer(pb_grpc.SchedulerServiceServicer):
    def __init__(self, registry: JobRegistry, hub: CommandHub, loop: DecisionLoop, policies: PolicyStore,
                 profiles: ProfileStore, tokens: JobTokens, identity: str) -> None:
        self._registry, self._hub, self._loop, self._policies, self._tokens = registry, hub, loop, policies, tokens
        self._profiles, self._identity = profiles, identity
        self._forms = PbForms()

    async def RegisterJob(self, request: pb.RegisterJobRequest, context: grpc.aio.ServicerContext) -> pb.RegisterJobResponse:
        spec = spec_from_pb(request.spec)
        settings = await self._policies.get()
        view = await self._registry.register(spec, even_split(spec.global_batch, len(spec.ranks)), settings.name)
        return pb.RegisterJobResponse(job=summary_to_pb(view, None), job_token=self._tokens.issue(spec.job_id))

    async def DeregisterJob(self, request: pb.DeregisterJobRequest, context: grpc.aio.ServicerContext) -> pb.DeregisterJobResponse:
        _require(request.job_id)
        return pb.DeregisterJobResponse(removed=await self._registry.deregister(request.job_id))

    async def StreamCommands(self, request: pb.StreamCommandsRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.StreamCommandsResponse]:
        _require(request.job_id)
        view = self._registry.view(request.job_id)
        if not 0 <= request.rank < len(view.spec.ranks):
            raise InvalidArgument(f"rank {request.rank} is out of range for job {request.job_id!r} with {len(view.spec.ranks)} ranks")
        queue = self._hub.subscribe(request.job_id)
        joined = None
        try:
            joined = await self._registry.join(request.job_id, request.rank, self._identity)
            known = request.known_version
            current = self._registry.split(request.job_id)
            if current and current.version > known:
                known = current.version
                yield pb.StreamCommandsResponse(command=split_to_pb(request.job_id, current))
            while True:
                split = await queue.get()
                if split is None:
                    return  # the job was deregistered: the stream ends
                if split.version > known:
                    known = split.version
                    yield pb.StreamCommandsResponse(command=split_to_pb(request.job_id, split))
        finally:
            self._hub.unsubscribe(request.job_id, queue)
            if joined is not None:
                try:
                    await self._registry.leave(request.job_id, request.rank, joined)
                except Exception:  # noqa: BLE001 - the lease removes it anyway
                    logger.debug("leave failed", exc_info=True)

    async def ListJobs(self, request: pb.ListJobsRequest, context: grpc.aio.ServicerContext) -> pb.ListJobsResponse:
        views = self._registry.views()
        est = await self._loop.estimates(views)
        out = pb.ListJobsResponse()
        for v in views:
            e = est.get(v.spec.job_id)
            if request.include_finished or job_state(e) != pb.JOB_STATE_FINISHED:
                fill_summary(out.jobs.add(), v, e, self._forms)
        self._forms.keep_only(views)
        return out

    async def GetJob(self, request: pb.GetJobRequest, context: grpc.aio.ServicerContext) -> pb.GetJobResponse:
        _require(request.job_id)
        if not 0 <= request.history_limit <= 10_000:
            raise InvalidArgument("history_limit must be in [0, 10000]")
        view = self._registry.view(request.job_id)
        est = (await self._loop.estimates()).get(request.job_id)
        history = await self._registry.history(request.job_id, request.history_limit or 100)
        return pb.GetJobResponse(job=summary_to_pb(view, est),
                                 history=[pb.HistoryEntry(split=split_to_pb(request.job_id, h), slowdown=h.slowdown) for h in history])

    async def GetPolicy(self, request: pb.GetPolicyRequest, context: grpc.aio.ServicerContext) -> pb.GetPolicyResponse:
        return pb.GetPolicyResponse(policy=policy_to_pb(await self._policies.get()), available=list(policy_names()))

    async def SetPolicy(self, request: pb.SetPolicyRequest, context: grpc.aio.ServicerContext) -> pb.SetPolicyResponse:
        p = request.policy
        return pb.SetPolicyResponse(policy=policy_to_pb(await self._policies.set(p.name, p.period_s, p.min_change)))

    async def PinSplit(self, request: pb.PinSplitRequest, context: grpc.aio.ServicerContext) -> pb.PinSplitResponse:
        _require(request.job_id)
        view = self._registry.view(request.job_id)
        sizes = validate_batch_sizes(view.spec, tuple(request.batch_sizes))
        return pb.PinSplitResponse(split=split_to_pb(request.job_id, await self._registry.pin(request.job_id, sizes)))

    async def ReleaseSplit(self, request: pb.ReleaseSplitRequest, context: grpc.aio.ServicerContext) -> pb.ReleaseSplitResponse:
        _require(request.job_id)
        self._registry.view(request.job_id)
        return pb.ReleaseSplitResponse(was_pinned=await self._registry.set_pin(request.job_id, None))

    async def ExplainDecision(self, request: pb.ExplainDecisionRequest, context: grpc.aio.ServicerContext) -> pb.ExplainDecisionResponse:
        record = await self._loop.last_decision()
        if record is None:
            return pb.ExplainDecisionResponse()
        return pb.ExplainDecisionResponse(decision=decision_to_pb(record, request.job_id))

    async def PutProfile(self, request: pb.PutProfileRequest, context: grpc.aio.ServicerContext) -> pb.PutProfileResponse:
        return pb.PutProfileResponse(replaced=await self._profiles.put(request.profile))

    async def GetProfile(self, request: pb.GetProfileRequest, context: grpc.aio.ServicerContext) -> pb.GetProfileResponse:
        return pb.GetProfileResponse(profile=await self._profiles.get(request.model, request.device_type))

    async def ListProfiles(self, request: pb.ListProfilesRequest, context: grpc.aio.ServicerContext) -> pb.ListProfilesResponse:
        return pb.ListProfilesResponse(profiles=await self._profiles.list())


def _require(job_id: str) -> None:
    if not job_id:
        raise InvalidArgument("job_id is required")
    check_job_id(job_id)  # a malformed id is the caller's error, not a failed key lookup
