"""Pipeline runs: parse, plan, pin, and start each prefetch at its planned time.

A run's datasets are pinned for the run (owner = run id) so eviction never
drops what a pending step needs; the pins are released once the run's
predicted makespan plus `release_margin_s` has passed (gpufair does not see
Kubeflow step completions; an operator can evict with --force earlier).
A dataset the cache refuses (its URI fails the cache's check) is reported in
the run and skipped before anything is pinned: a run is never half-pinned.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from gpufair.cache.history import StepHistory
from gpufair.cache.node.cache import NodeCache
from gpufair.cache.planner import Plan, parse_pipeline, plan
from gpufair.common.errors import AlreadyExists, GpufairError, InvalidArgument, NotFound, Unavailable
from gpufair.common.keys import Keys, check_segment
from gpufair.common.state import StateStore
from gpufair.common.uris import parse_dataset_uri

logger = logging.getLogger(__name__)

MAX_YAML_BYTES = 4 * 1024 * 1024
MAX_PARAMETERS, MAX_PARAMETER_BYTES = 1000, 64 * 1024
SizeOf = Callable[[str], Awaitable[int | None]]


@dataclass
class Run:
    run_id: str
    plan: Plan
    started_unix_s: float
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # dataset URI -> why the cache refused it


def run_id_for(name: str, now: float) -> str:
    """`<pipeline>-<unix time>-<random>`: unique even for two submissions in one second."""
    base = re.sub(r"[^A-Za-z0-9._-]", "-", name or "pipeline").strip("-.") or "pipeline"
    return f"{base[:200]}-{int(now)}-{secrets.token_hex(3)}"


class PipelineRunner:
    def __init__(self, cache: NodeCache, state: StateStore | None, keys: Keys, size_of: SizeOf, *,
                 bandwidth_bytes_per_s: float = 100e6, release_margin_s: float = 600.0, clock: Callable[[], float] = time.time) -> None:
        self._cache, self._state, self._keys, self._size_of = cache, state, keys, size_of
        self._history = StepHistory(state, keys) if state is not None else None
        self.bandwidth, self._margin, self._clock = bandwidth_bytes_per_s, release_margin_s, clock
        self.runs: dict[str, Run] = {}

    async def _durations(self, step_keys: list[str]) -> dict[str, list[float]]:
        return await self._history.durations(step_keys) if self._history is not None else {}

    async def submit(self, text: str, source: str, run_id: str, start_prefetch: bool,
                     parameters: dict[str, str] | None = None) -> Run:
        if len(text.encode()) > MAX_YAML_BYTES:
            raise InvalidArgument(f"{source}: pipeline YAML is larger than {MAX_YAML_BYTES} bytes")
        parameters = dict(parameters or {})
        if len(parameters) > MAX_PARAMETERS:
            raise InvalidArgument(f"{len(parameters)} parameters; at most {MAX_PARAMETERS}")
        for name, value in parameters.items():
            if not name or len(name) > 200 or len(value.encode()) > MAX_PARAMETER_BYTES:
                raise InvalidArgument(f"parameter {name!r}: a name of 1-200 characters and a value of at most "
                                      f"{MAX_PARAMETER_BYTES} bytes, please")
        if run_id:
            try:
                check_segment("run_id", run_id)
            except ValueError as exc:
                raise InvalidArgument(str(exc)) from None
        if run_id in self.runs:
            raise AlreadyExists(f"pipeline run {run_id!r} was already submitted on this node")
        # Parsing a large document takes a while: off the event loop, which also serves trainers.
        pipeline = await asyncio.to_thread(lambda: parse_pipeline(text, source or "<submitted>", parameters=parameters))
        fetchable = [d.uri for d in pipeline.datasets if d.fetchable]
        sizes = {uri: s for uri, s in zip(fetchable, await asyncio.gather(*(self._size_of(u) for u in fetchable))) if s is not None}
        durations = await self._durations([s.history_key(pipeline.name) for s in pipeline.steps])
        the_plan = await asyncio.to_thread(plan, pipeline, durations=durations, sizes=sizes, bandwidth_bytes_per_s=self.bandwidth, now=0.0)
        now = self._clock()
        run = Run(run_id or run_id_for(pipeline.name, now), the_plan, now)
        if start_prefetch:
            self._schedule(run)
        self.runs[run.run_id] = run
        if self._state is not None:
            try:
                await self._state.put(self._keys.pipeline_plan(run.run_id), {"started_unix_s": now, "plan": the_plan.to_json()})
            except Unavailable as exc:
                logger.warning("plan of %s not stored in etcd: %s", run.run_id, exc)
        return run

    def _schedule(self, run: Run) -> None:
        wanted = [d for d in run.plan.datasets if d.dataset.fetchable and d.status not in ("unused", "not-fetchable")]
        for d in wanted:  # checked before the first pin, so a refusal never leaves a run half-pinned
            try:
                parse_dataset_uri(d.dataset.uri)
            except GpufairError as exc:
                run.refused[d.dataset.uri] = f"refused by the cache: {exc}"
                logger.warning("run %s: skipping %s: %s", run.run_id, d.dataset.uri, exc)
        for d in wanted:
            if d.dataset.uri in run.refused:
                continue
            self._cache.pin(d.dataset.uri, run.run_id)
            start = d.prefetch_start_s or 0.0
            deadline = run.started_unix_s + d.deadline_s if d.deadline_s is not None else None
            run.tasks.append(asyncio.create_task(self._prefetch_at(run, d.dataset.uri, start, deadline), name=f"prefetch {d.dataset.uri}"))
        run.tasks.append(asyncio.create_task(self._release_later(run), name=f"release {run.run_id}"))

    async def _prefetch_at(self, run: Run, uri: str, start_s: float, deadline: float | None) -> None:
        delay = run.started_unix_s + start_s - self._clock()
        if delay > 0:
            await asyncio.sleep(delay)
        try:
            await self._cache.prefetch(uri, priority=1, deadline=deadline, pin_owner=run.run_id)
        except Exception as exc:  # noqa: BLE001 - the entry's state carries the failure
            logger.warning("prefetch of %s for %s failed: %s", uri, run.run_id, exc)

    async def _release_later(self, run: Run) -> None:
        await asyncio.sleep(max(run.plan.makespan_s, 0.0) + self._margin)
        self._cache.unpin(run.run_id)
        if self.runs.get(run.run_id) is run:
            del self.runs[run.run_id]  # its plan stays in etcd

    def get(self, run_id: str) -> Run:
        if run_id not in self.runs:
            raise NotFound(f"no pipeline run {run_id!r} on this node")
        return self.runs[run_id]

    async def close(self) -> None:
        tasks = [t for r in self.runs.values() for t in r.tasks]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
