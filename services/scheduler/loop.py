"""Every period: the figures every replica shows, and on the leader the decision
round (inputs -> policy core -> versioned splits in etcd) and the care of job lives."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from gpufair.common.errors import Unavailable
from gpufair.common.tasks import stop_task
from gpufair.common.keys import Keys
from gpufair.common.state import StaleVersion, StateStore
from gpufair.scheduler.decisions import DecisionRecord, JobDecisionRecord
from gpufair.scheduler.figures import FigureBoard
from gpufair.scheduler.housekeeping import Housekeeper, LifeSettings
from gpufair.scheduler.jobindex import JobView
from gpufair.scheduler.jobs import Split
from gpufair.scheduler.policy import PolicyConfig, WarmStart, decide
from gpufair.scheduler.registry import JobRegistry
from gpufair.scheduler.snapshot import JobEstimate, JobMetrics, Profiles
from gpufair.scheduler.sources import PolicyStore

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoundResult:
    record: DecisionRecord  # the round as stored for "explain"
    written: int


def apply_step_for(metrics: JobMetrics | None, global_batch: int, lead_s: float) -> int:
    """A step far enough ahead that every rank can get the command before it."""
    if metrics is None or metrics.last_step < 0:
        return 0
    steps_per_s = metrics.samples_per_s / global_batch if global_batch else 0.0
    return metrics.last_step + max(2, math.ceil(steps_per_s * lead_s))


class Leadership(Protocol):
    """Whether this replica decides (`gpufair.common.leader.LeaderElection`)."""

    @property
    def is_leader(self) -> bool: ...


class DecisionLoop:
    def __init__(self, state: StateStore, keys: Keys, registry: JobRegistry, election: Leadership, policies: PolicyStore,
                 fetch_metrics: Callable[[], Awaitable[dict[str, JobMetrics]]], fetch_profiles: Callable[[], Awaitable[Profiles]],
                 *, lead_s: float = 0.5, clock: Callable[[], float] = time.time, life: LifeSettings = LifeSettings()) -> None:
        self._state, self._keys, self._registry, self._election = state, keys, registry, election
        self._policies, self._fetch_metrics, self._fetch_profiles = policies, fetch_metrics, fetch_profiles
        self._lead_s, self._clock = lead_s, clock
        self.round_listeners: list[Callable[[RoundResult], None]] = []  # told of every round (metrics)
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0
        self.board = FigureBoard()  # what ListJobs and GetJob show, on every replica
        self._housekeeper = Housekeeper(registry, self.board, life, clock)
        self._profiles: Profiles = {}  # the last profiles read, for reads while etcd is unreachable
        self._warm = WarmStart()  # sd-maxmin's LP bases from the last round: rounds run one at a time

    @property
    def latest(self) -> dict[str, JobEstimate]:
        """Per-job numbers of the latest refresh (the leader's round decided on these)."""
        return {j: f.estimate for j, f in self.board.figures.items()}

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="decision-loop")

    async def stop(self) -> None:
        await stop_task(self._task)

    async def _run(self) -> None:
        period, skipped = 5.0, ""
        while True:
            try:
                period = (await self._policies.get()).period_s
                await self.tick()
                if skipped:
                    logger.info("decision rounds resumed")  # their inputs' own outage is logged where it is seen
                skipped = ""
            except asyncio.CancelledError:
                raise
            except Unavailable as exc:
                if not skipped:  # one line when rounds stop, one when they resume: not one per period
                    logger.info("decision rounds skipped until their inputs answer: %s", exc)
                skipped = str(exc)
            except Exception:  # noqa: BLE001 - one bad round must not stop the loop
                logger.exception("decision round failed")
            await asyncio.sleep(period)

    async def tick(self) -> RoundResult | None:
        """One period: refresh the figures; on the leader, look after job lives and
        decide (Unavailable when the metrics service does not answer)."""
        views = self._registry.views() if self._registry.ready else []
        fresh = await self._safe_metrics()
        leader = self._election.is_leader and self._registry.ready
        if leader:
            await self._housekeeper.sweep(views)
            if fresh is not None:
                return await self.run_round(fresh)  # refreshes the figures it decides on
        await self.board.refresh(views, fresh, await self._safe_profiles(), self._clock())
        if leader:
            raise Unavailable("the metrics service does not answer")
        return None

    async def refresh(self) -> None:
        """Refresh the figures now (tests and benchmarks; the loop does it every period)."""
        await self.board.refresh(self._registry.views(), await self._safe_metrics(), await self._safe_profiles(), self._clock())

    async def _safe_profiles(self) -> Profiles:
        # Reads serve the last good state during an etcd outage (the job mirror does the same).
        try:
            self._profiles = await self._fetch_profiles()
        except Unavailable as exc:
            logger.info("profiles unavailable, using the last ones read: %s", exc)
        return self._profiles

    async def _safe_metrics(self) -> dict[str, JobMetrics] | None:
        """The metrics service's answer; None when it does not answer (the figures then keep the last known)."""
        try:
            return await self._fetch_metrics()
        except Unavailable as exc:
            logger.debug("metrics unavailable: %s", exc)
            return None

    async def run_round(self, metrics: dict[str, JobMetrics] | None = None) -> RoundResult:
        """Decide on the active jobs; reads the metrics service unless given its answer."""
        settings = await self._policies.get()
        if metrics is None:
            metrics = await self._fetch_metrics()
        views = [v for v in self._registry.views() if v.active]
        cluster, est = await self.board.refresh(views, metrics, await self._fetch_profiles(), self._clock())
        t0 = time.perf_counter()
        decisions = await asyncio.to_thread(decide, cluster, settings.name, PolicyConfig(min_change=settings.min_change),
                                            self._warm)
        duration = time.perf_counter() - t0
        by_job = {v.spec.job_id: v for v in views}
        parts = []
        for job, d in decisions.items():
            changed = await self._issue(by_job[job], d.split, d.changed, d.explanation, settings.name, metrics, est[job].slowdown)
            old = by_job[job].split
            parts.append(JobDecisionRecord(job, old.batch_sizes if old else (), tuple(d.split), est[job].slowdown,
                                           float(d.numbers.get("sd_at_lp_rate", 0.0)), changed, d.explanation))
        written = sum(p.changed for p in parts)
        sds = [e.slowdown for e in est.values() if e.included and e.slowdown > 0]
        summary = (f"{settings.name}: {len(decisions)} jobs decided, {written} re-split; "
                   f"max SD {max(sds, default=0):.2f}, mean SD {sum(sds) / len(sds) if sds else 0:.2f}")
        record = DecisionRecord(settings.name, self._clock(), duration, summary, tuple(parts))
        await self._state.put(self._keys.decision(), record.pack())
        self.rounds += 1
        result = RoundResult(record, written)
        for listener in self.round_listeners:
            listener(result)
        return result

    async def _issue(self, view: JobView, sizes: tuple[int, ...], changed: bool, why: str, policy: str,
                     metrics: dict[str, JobMetrics], slowdown: float) -> bool:
        """Write a job's new split as the next version; False if it is unchanged or lost a race."""
        old = view.split
        if not changed or old is None or tuple(sizes) == old.batch_sizes:
            return False
        step = apply_step_for(metrics.get(view.spec.job_id), view.spec.global_batch, self._lead_s)
        split = Split(old.version + 1, step, tuple(sizes), policy, why[:500], self._clock(), slowdown)
        try:
            await self._registry.write_split(view.spec.job_id, split)
            return True
        except StaleVersion:
            logger.info("split of %s changed concurrently; skipped this round", view.spec.job_id)
            return False

    async def last_decision(self) -> DecisionRecord | None:
        """The latest round as stored in etcd (any replica can explain it)."""
        stored = await self._state.get(self._keys.decision())
        return None if stored is None else DecisionRecord.unpack(stored.value)
