"""SchedulerService: protobuf <-> domain, nothing else."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from collections.abc import AsyncIterator

import grpc

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from gpufair.common.errors import AlreadyExists, InvalidArgument, NotFound
from gpufair.common.limits import MAX_HISTORY
from gpufair.common.tokens import JobTokens
from gpufair.scheduler.decisions import DecisionRecord
from gpufair.scheduler.fleetview import startup_excluded
from gpufair.scheduler.hub import CommandHub
from gpufair.scheduler.jobs import check_job_id, validate_batch_sizes
from gpufair.scheduler.lifecycle import Phase
from gpufair.scheduler.livequeue import held_at_registration
from gpufair.scheduler.loop import DecisionLoop
from gpufair.scheduler.policy import even_split, policy_names
from gpufair.scheduler.profiles import ProfileStore
from gpufair.scheduler.registry import JobRegistry
from gpufair.scheduler.sources import PolicySettings, PolicyStore
from gpufair.scheduler.submissions import SubmissionStore
from gpufair.scheduler.summaries import (Summaries, fill_summary, queue_entry_to_pb, spec_from_pb, split_to_pb,
                                         state_of, submission_from_pb, submission_to_pb)

_OUTCOME = {pb.JOB_OUTCOME_UNSPECIFIED: Phase.FINISHED, pb.JOB_OUTCOME_FINISHED: Phase.FINISHED,
            pb.JOB_OUTCOME_FAILED: Phase.FAILED}

logger = logging.getLogger(__name__)


def policy_to_pb(s: PolicySettings) -> pb.PolicyConfig:
    return pb.PolicyConfig(name=s.name, period_s=s.period_s, min_change=s.min_change, queue=s.queue,
                           placement=s.placement, shares=s.shares)


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
                 profiles: ProfileStore, tokens: JobTokens, identity: str,
                 submissions: SubmissionStore | None = None) -> None:
        self._registry, self._hub, self._loop, self._policies, self._tokens = registry, hub, loop, policies, tokens
        self._submissions = submissions or loop.submissions
        self._profiles, self._identity = profiles, identity
        self._summaries = Summaries(loop.board)
        loop.board.listeners.append(self.rebuild_summaries)

    def rebuild_summaries(self) -> None:
        """After each refresh of the figures: rebuild the changed summaries before anyone asks."""
        self._summaries.rebuild(self._registry.views())

    async def RegisterJob(self, request: pb.RegisterJobRequest, context: grpc.aio.ServicerContext) -> pb.RegisterJobResponse:
        spec = spec_from_pb(request.spec)
        settings = await self._policies.get()
        submitted = await self._submissions.find(spec.job_id)
        shares: tuple[float, ...] = ()
        if submitted is None and settings.shares == "paced" and held_at_registration(self._loop.last_plan, spec):
            shares = (0.0,) * len(spec.ranks)  # its GPUs run other jobs: it waits for the next round
        arrival = startup_excluded(submitted, time.time()) if submitted is not None else None
        if submitted is not None and submitted.exclusive_rate > 0 and spec.exclusive_rate <= 0:
            spec = replace(spec, exclusive_rate=submitted.exclusive_rate)  # what its submitter measured
        view = await self._registry.register(spec, even_split(spec.global_batch, len(spec.ranks)), settings.name,
                                             shares=shares, arrival=arrival)
        if submitted is not None:
            await self._submissions.withdraw(spec.job_id)  # it is a registered job now
        self._loop.wake()  # the jobs it goes ahead of give way before its first step, not a period later
        return pb.RegisterJobResponse(job=fill_summary(pb.JobSummary(), view, None), job_token=self._tokens.issue(spec.job_id))

    async def SubmitJob(self, request: pb.SubmitJobRequest, context: grpc.aio.ServicerContext) -> pb.SubmitJobResponse:
        sub = submission_from_pb(request.submission, time.time())
        if sub.job_id in self._registry.job_ids() and self._registry.view(sub.job_id).active:
            raise AlreadyExists(f"job {sub.job_id!r} is registered and active; pick another id")
        stored = await self._submissions.submit(sub)
        self._loop.wake()
        return pb.SubmitJobResponse(submission=submission_to_pb(stored))

    async def GetSubmission(self, request: pb.GetSubmissionRequest, context: grpc.aio.ServicerContext) -> pb.GetSubmissionResponse:
        _require(request.job_id)
        sub = await self._submissions.get(request.job_id)
        res = pb.GetSubmissionResponse(submission=submission_to_pb(sub))
        if not sub.placed:
            _, entries = await self._loop.queue()
            for entry in entries:
                if entry.job == sub.job_id:
                    res.queue.CopyFrom(queue_entry_to_pb(entry))
        return res

    async def WithdrawSubmission(self, request: pb.WithdrawSubmissionRequest,
                                 context: grpc.aio.ServicerContext) -> pb.WithdrawSubmissionResponse:
        _require(request.job_id)
        withdrawn = await self._submissions.withdraw(request.job_id)
        if withdrawn:
            self._loop.wake()  # its GPUs and queue place go to the others now, not a period later
        return pb.WithdrawSubmissionResponse(withdrawn=withdrawn)

    async def ListQueue(self, request: pb.ListQueueRequest, context: grpc.aio.ServicerContext) -> pb.ListQueueResponse:
        decided, entries = await self._loop.queue()
        return pb.ListQueueResponse(entries=[queue_entry_to_pb(e) for e in entries], decided_unix_s=decided)

    async def DeregisterJob(self, request: pb.DeregisterJobRequest, context: grpc.aio.ServicerContext) -> pb.DeregisterJobResponse:
        _require(request.job_id)
        if request.outcome not in _OUTCOME:
            raise InvalidArgument(f"outcome={request.outcome} is not a JobOutcome (0-{max(_OUTCOME)})")
        if request.samples_done < 0:
            raise InvalidArgument(f"samples_done={request.samples_done} must be >= 0")
        view = self._registry.view(request.job_id)
        figures = self._loop.board.get(request.job_id)
        samples = request.samples_done or (figures.estimate.samples_done if figures else 0)
        exclusive = figures.estimate.exclusive_rate if figures else view.spec.exclusive_rate
        phase = _OUTCOME[request.outcome]
        reason = request.reason or ("session closed" if phase is Phase.FINISHED else "the trainers reported a failure")
        life = await self._registry.end(request.job_id, phase, reason, samples, exclusive)
        self._loop.wake()  # the jobs it held back resume now
        view = self._registry.view(request.job_id)
        return pb.DeregisterJobResponse(ended=life is not None, job=fill_summary(pb.JobSummary(), view, figures))

    async def RemoveJob(self, request: pb.RemoveJobRequest, context: grpc.aio.ServicerContext) -> pb.RemoveJobResponse:
        _require(request.job_id)
        view = self._registry.view(request.job_id)
        previous = state_of(view)
        if view.active and not request.purge:
            figures = self._loop.board.get(request.job_id)
            samples = figures.estimate.samples_done if figures else 0
            exclusive = figures.estimate.exclusive_rate if figures else view.spec.exclusive_rate
            if await self._registry.end(request.job_id, Phase.REMOVED, "removed by an operator", samples, exclusive) is not None:
                return pb.RemoveJobResponse(previous_state=previous, purged=False)
        await self._registry.purge(request.job_id)
        return pb.RemoveJobResponse(previous_state=previous, purged=True)

    async def StreamCommands(self, request: pb.StreamCommandsRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.StreamCommandsResponse]:
        _require(request.job_id)
        view = self._registry.view(request.job_id)
        self._registry.check_active(view)
        if not 0 <= request.rank < len(view.spec.ranks):
            raise InvalidArgument(f"rank {request.rank} is out of range for job {request.job_id!r} with {len(view.spec.ranks)} ranks")
        queue = self._hub.subscribe(request.job_id)
        joined = None
        try:
            joined = await self._registry.join(request.job_id, request.rank, self._identity)
            known = request.known_version
            current = self._registry.split(request.job_id)
            if current:
                # Sent even when the rank knows it: the first message tells a
                # reconnecting rank its stream is up (a held job waits on it).
                known = max(known, current.version)
                yield pb.StreamCommandsResponse(command=split_to_pb(request.job_id, current, view.life))
            while True:
                split = await queue.get()
                if split is None:
                    return  # the job ended or was removed: the stream ends
                if split.version > known:
                    known = split.version
                    yield pb.StreamCommandsResponse(command=split_to_pb(request.job_id, split, view.life))
        finally:
            self._hub.unsubscribe(request.job_id, queue)
            if joined is not None:
                try:
                    await self._registry.leave(request.job_id, request.rank, joined)
                except Exception:  # noqa: BLE001 - the lease removes it anyway
                    logger.debug("leave failed", exc_info=True)

    async def ListJobs(self, request: pb.ListJobsRequest, context: grpc.aio.ServicerContext) -> pb.ListJobsResponse:
        views = self._registry.views()
        return self._summaries.listing(views if request.include_finished else [v for v in views if v.active])

    async def GetJob(self, request: pb.GetJobRequest, context: grpc.aio.ServicerContext) -> pb.GetJobResponse:
        _require(request.job_id)
        if not 0 <= request.history_limit <= MAX_HISTORY:
            raise InvalidArgument(f"history_limit={request.history_limit} must be in [0, {MAX_HISTORY}]")
        view = self._registry.view(request.job_id)
        history = await self._registry.history(request.job_id, request.history_limit or 100)
        return pb.GetJobResponse(job=self._summaries.of(view),
                                 history=[pb.HistoryEntry(split=split_to_pb(request.job_id, h, view.life), slowdown=h.slowdown)
                                          for h in history])

    async def GetPolicy(self, request: pb.GetPolicyRequest, context: grpc.aio.ServicerContext) -> pb.GetPolicyResponse:
        return pb.GetPolicyResponse(policy=policy_to_pb(await self._policies.get()), available=list(policy_names()))

    async def SetPolicy(self, request: pb.SetPolicyRequest, context: grpc.aio.ServicerContext) -> pb.SetPolicyResponse:
        p = request.policy
        return pb.SetPolicyResponse(policy=policy_to_pb(await self._policies.set(
            p.name, p.period_s, p.min_change, p.queue, p.placement, p.shares, p.preset)))

    async def PinSplit(self, request: pb.PinSplitRequest, context: grpc.aio.ServicerContext) -> pb.PinSplitResponse:
        _require(request.job_id)
        view = self._registry.view(request.job_id)
        self._registry.check_active(view)
        sizes = validate_batch_sizes(view.spec, tuple(request.batch_sizes))
        return pb.PinSplitResponse(split=split_to_pb(request.job_id, await self._registry.pin(request.job_id, sizes), view.life))

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
