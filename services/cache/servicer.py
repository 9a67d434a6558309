"""CacheService: protobuf <-> NodeCache / PipelineRunner."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc

from gpufair.api.cache.v1 import cache_service_pb2 as pb
from gpufair.api.cache.v1 import cache_service_pb2_grpc as pb_grpc
from gpufair.cache.exporter import CacheCounters
from gpufair.cache.history import StepHistory
from gpufair.cache.node.cache import NodeCache
from gpufair.cache.node.status import EntryState, EntryStatus
from gpufair.cache.pipelines import PipelineRunner, Run
from gpufair.common.errors import InvalidArgument
from gpufair.common.limits import MAX_WAIT_S

MAX_UNIX_S = 1e11  # the year 5138: beyond it a deadline is a mistake, not a plan

_STATE = {EntryState.ABSENT: pb.ENTRY_STATE_ABSENT, EntryState.FETCHING: pb.ENTRY_STATE_FETCHING,
          EntryState.CACHED: pb.ENTRY_STATE_CACHED, EntryState.FAILED: pb.ENTRY_STATE_FAILED}


def entry_to_pb(s: EntryStatus, node: str) -> pb.Entry:
    done = s.progress.done_bytes if s.progress else (s.size_bytes if s.state is EntryState.CACHED else 0)
    total = s.progress.total_bytes if s.progress and s.progress.total_bytes else s.size_bytes
    return pb.Entry(uri=s.uri, state=_STATE[s.state], local_path=s.path or "", bytes_done=done, bytes_total=total,
                    last_used_unix_s=s.last_use, pinned=s.pinned, error=s.reason, node=node)


def plan_to_pb(run: Run, cache: NodeCache, node: str) -> pb.Plan:
    """A run's plan, with each fetchable dataset's state on this node."""
    p = run.plan.pipeline
    out = pb.Plan(run_id=run.run_id, format=p.format, pipeline_name=p.name or "", unresolved=[u.reason for u in p.unresolved])
    for s in run.plan.steps:
        st = s.step
        out.steps.append(pb.PlannedStep(name=st.name, depends_on=st.depends_on, datasets=st.datasets, gpus=st.gpus or 0,
                                        predicted_start_s=s.start_s, predicted_duration_s=s.duration_s,
                                        node_selector={str(h): "" for h in st.node_hints}))
    for d in run.plan.datasets:
        ds, refused = d.dataset, run.refused.get(d.dataset.uri)
        fetchable = ds.fetchable and refused is None
        item = pb.PlannedDataset(uri=ds.uri, consumers=ds.consumers, size_bytes=d.size_bytes or 0,
                                 prefetch_start_s=d.prefetch_start_s or 0.0, deadline_s=d.deadline_s or 0.0, fetchable=fetchable,
                                 note=refused or ds.reason or ("" if d.status == "scheduled" else d.status))
        if fetchable:
            item.entry.CopyFrom(entry_to_pb(cache.status(ds.uri), node))
        out.datasets.append(item)
    return out


class CacheServicer(pb_grpc.CacheServiceServicer):
    def __init__(self, cache: NodeCache, runner: PipelineRunner, node: str, history: StepHistory,
                 cluster: Callable[[], Awaitable[list[tuple[str, EntryStatus]]]], counters: CacheCounters | None = None) -> None:
        self._cache, self._runner, self._node = cache, runner, node
        self._history, self._cluster = history, cluster
        self.counters = counters or CacheCounters()

    async def Prefetch(self, request: pb.PrefetchRequest, context: grpc.aio.ServicerContext) -> pb.PrefetchResponse:
        if not (math.isfinite(request.deadline_unix_s) and 0 <= request.deadline_unix_s <= MAX_UNIX_S):
            raise InvalidArgument(f"deadline_unix_s={request.deadline_unix_s} must be 0 (none) or a Unix time up to {MAX_UNIX_S:g}")
        if len(request.pin_owner) > 253:
            raise InvalidArgument(f"pin_owner has {len(request.pin_owner)} characters; at most 253")
        deadline = request.deadline_unix_s or None
        status = await self._cache.prefetch(request.uri, priority=request.priority, deadline=deadline, pin_owner=request.pin_owner or None)
        return pb.PrefetchResponse(entry=entry_to_pb(status, self._node))

    async def Resolve(self, request: pb.ResolveRequest, context: grpc.aio.ServicerContext) -> pb.ResolveResponse:
        if not 0 <= request.wait_s <= MAX_WAIT_S:
            raise InvalidArgument(f"wait_s={request.wait_s} must be in [0, {MAX_WAIT_S:g}]")
        hit = self._cache.status(request.uri).state is EntryState.CACHED
        self.counters.hits, self.counters.misses = self.counters.hits + hit, self.counters.misses + (not hit)
        if request.fetch or request.wait_s > 0:
            status = await self._cache.resolve(request.uri, wait=request.wait_s > 0, timeout=request.wait_s or None)
        else:
            status = self._cache.status(request.uri)
        return pb.ResolveResponse(entry=entry_to_pb(status, self._node))

    async def ReadObject(self, request: pb.ReadObjectRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.ReadObjectResponse]:
        offset = 0
        async for chunk in self._cache.stream(request.uri):
            yield pb.ReadObjectResponse(data=chunk, offset=offset)
            offset += len(chunk)

    async def ListEntries(self, request: pb.ListEntriesRequest, context: grpc.aio.ServicerContext) -> pb.ListEntriesResponse:
        used, capacity = self._cache.usage()
        return pb.ListEntriesResponse(entries=[entry_to_pb(s, self._node) for s in self._cache.list()], capacity_bytes=capacity, used_bytes=used)

    async def EvictEntry(self, request: pb.EvictEntryRequest, context: grpc.aio.ServicerContext) -> pb.EvictEntryResponse:
        last = await self._cache.evict(request.uri, force=request.force)
        return pb.EvictEntryResponse(evicted=True, freed_bytes=last.size_bytes)

    async def SubmitPipeline(self, request: pb.SubmitPipelineRequest, context: grpc.aio.ServicerContext) -> pb.SubmitPipelineResponse:
        run = await self._runner.submit(request.yaml, request.source, request.run_id, request.start_prefetch, dict(request.parameters))
        await asyncio.sleep(0)  # let prefetches due now start, so the plan shows them
        return pb.SubmitPipelineResponse(plan=plan_to_pb(run, self._cache, self._node))

    async def GetPlan(self, request: pb.GetPlanRequest, context: grpc.aio.ServicerContext) -> pb.GetPlanResponse:
        return pb.GetPlanResponse(plan=plan_to_pb(self._runner.get(request.run_id), self._cache, self._node))

    async def ListPipelines(self, request: pb.ListPipelinesRequest, context: grpc.aio.ServicerContext) -> pb.ListPipelinesResponse:
        out = pb.ListPipelinesResponse()
        for run in sorted(self._runner.runs.values(), key=lambda r: r.started_unix_s):
            uris = [d.dataset.uri for d in run.plan.datasets if d.dataset.fetchable and d.dataset.uri not in run.refused]
            cached = sum(self._cache.status(u).state is EntryState.CACHED for u in uris)
            out.runs.add(run_id=run.run_id, pipeline_name=run.plan.pipeline.name or "", started_unix_s=run.started_unix_s,
                         makespan_s=run.plan.makespan_s, datasets=len(run.plan.datasets), cached=cached)
        return out

    async def RecordStepDuration(self, request: pb.RecordStepDurationRequest,
                                 context: grpc.aio.ServicerContext) -> pb.RecordStepDurationResponse:
        step_key, seconds = await self._history.record(request.pipeline, request.step, request.seconds)
        return pb.RecordStepDurationResponse(step_key=step_key, seconds=seconds)

    async def ListClusterEntries(self, request: pb.ListClusterEntriesRequest,
                                 context: grpc.aio.ServicerContext) -> pb.ListClusterEntriesResponse:
        return pb.ListClusterEntriesResponse(entries=[entry_to_pb(s, node) for node, s in await self._cluster()])
