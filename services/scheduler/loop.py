"""Every period: the figures every replica shows, and on the leader the decision
round (inputs -> policy core -> versioned splits in etcd) and the care of job lives.
A job's registration, end or submission at this replica starts the next round at
once (`wake`)."""

from __future__ import annotations

import asyncio
import logging
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
from gpufair.scheduler.jobs import Split, is_held
from gpufair.scheduler.fleetview import Fleet, build_fleet
from gpufair.scheduler.livequeue import LiveQueueEntry, live_shares, queue_entries
from gpufair.scheduler.policy import PolicyConfig, WarmStart, decide, moved_fraction
from gpufair.scheduler.policy.admission import plan_round
from gpufair.scheduler.policy.fleet import RoundPlan
from gpufair.scheduler.policy.rounding import round_split
from gpufair.scheduler.registry import JobRegistry
from gpufair.scheduler.snapshot import JobEstimate, JobMetrics, Profiles
from gpufair.scheduler.sources import PolicySettings, PolicyStore
from gpufair.scheduler.submissions import PLACED_TTL_S, SubmissionStore

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoundResult:
    record: DecisionRecord  # the round as stored for "explain"
    written: int
    admitted_waits: tuple[float, ...] = ()  # seconds each submission placed this round waited


def _shares_moved(old: tuple[float, ...], new: tuple[float, ...]) -> bool:
    """Pacing changed enough to tell the trainers: held <-> not, a share by 0.02+,
    or a sliver by half of itself."""
    if bool(old) != bool(new) or len(old) != len(new):
        return True
    return any(abs(a - b) >= 0.02 or (a <= 0) != (b <= 0) or (min(a, b) > 0 and max(a, b) >= 1.5 * min(a, b))
               for a, b in zip(old, new))


class Leadership(Protocol):
    """Whether this replica decides (`gpufair.common.leader.LeaderElection`)."""

    @property
    def is_leader(self) -> bool: ...


MIN_GAP_S = 0.05  # between two rounds, however often they are woken
LEADER_POLL_S = 0.5  # how soon a replica that became leader starts deciding


class DecisionLoop:
    def __init__(self, state: StateStore, keys: Keys, registry: JobRegistry, election: Leadership, policies: PolicyStore,
                 fetch_metrics: Callable[[], Awaitable[dict[str, JobMetrics]]], fetch_profiles: Callable[[], Awaitable[Profiles]],
                 *, clock: Callable[[], float] = time.time, life: LifeSettings = LifeSettings(),
                 submissions: SubmissionStore | None = None) -> None:
        self._state, self._keys, self._registry, self._election = state, keys, registry, election
        self._policies, self._fetch_metrics, self._fetch_profiles = policies, fetch_metrics, fetch_profiles
        self._clock = clock
        self.round_listeners: list[Callable[[RoundResult], None]] = []  # told of every round (metrics)
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0
        self.board = FigureBoard()  # what ListJobs and GetJob show, on every replica
        self._housekeeper = Housekeeper(registry, self.board, life, clock)
        self._profiles: Profiles = {}  # the last profiles read, for reads while etcd is unreachable
        self._warm = WarmStart()  # sd-maxmin's LP bases from the last round: rounds run one at a time
        self.submissions = submissions or SubmissionStore(state, keys)
        self.last_plan: RoundPlan | None = None  # this replica's latest round (registrations read it)
        self.last_queue: dict[str, LiveQueueEntry] = {}  # its queue, most urgent first
        self._woken = asyncio.Event()  # set by `wake`: the next round starts now

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
            could = self._election.is_leader and self._registry.ready  # decides this tick
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
            await asyncio.sleep(MIN_GAP_S)
            await self._until_next_round(period - MIN_GAP_S, could)

    async def _until_next_round(self, period: float, could: bool) -> None:
        """Wait out the period, unless woken, or unless this replica could not decide
        at the last tick and now can (a new leader, its job mirror ready, decides at once)."""
        clock = asyncio.get_running_loop()
        deadline = clock.time() + max(period, 0.0)
        while (left := deadline - clock.time()) > 0:
            try:
                await asyncio.wait_for(self._woken.wait(), min(left, LEADER_POLL_S))
                break
            except TimeoutError:
                if not could and self._election.is_leader and self._registry.ready:
                    break
        self._woken.clear()

    def wake(self) -> None:
        """Start the next round now, not at the end of the period: a job ended, was
        submitted or registered, so the jobs it held resume, a newcomer is placed, and
        the jobs a registered one goes ahead of give way at once."""
        self._woken.set()

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
        """Decide on the active jobs and submissions; reads the metrics service unless given its answer."""
        settings = await self._policies.get()
        if metrics is None:
            metrics = await self._fetch_metrics()
        views = [v for v in self._registry.views() if v.active]
        now = self._clock()
        cluster, est = await self.board.refresh(views, metrics, await self._fetch_profiles(), now)
        registered = {v.spec.job_id for v in views}
        waiting = []
        for sub in await self.submissions.list():
            if sub.placed and now - sub.placed_unix_s > PLACED_TTL_S:
                logger.info("submission %s placed %.0f s ago never started; dropped", sub.job_id, now - sub.placed_unix_s)
                await self.submissions.withdraw(sub.job_id)
            elif sub.job_id not in registered:
                waiting.append(sub)
        fleet = build_fleet(views, est, cluster, waiting, now)
        t0 = time.perf_counter()
        plan = await asyncio.to_thread(plan_round, fleet.jobs, fleet.gpus, now, settings.levers(), None, self.rounds)
        self.last_plan = plan
        shares = live_shares(plan, fleet)
        queue = self.last_queue = queue_entries(plan, fleet, now, shares)
        waits = await self._place(plan, fleet, now)
        by_job = {v.spec.job_id: v for v in views}
        parts = []
        if settings.shares == "paced":
            duration = time.perf_counter() - t0
            for job, given in shares.items():
                if job not in by_job:
                    continue
                part = await self._pace(by_job[job], plan, given, queue.get(job), settings, est[job].slowdown)
                parts.append(part)
        else:
            decisions = await asyncio.to_thread(decide, cluster, settings.name,
                                                PolicyConfig(min_change=settings.min_change), self._warm)
            duration = time.perf_counter() - t0
            for job, d in decisions.items():
                changed = await self._issue(by_job[job], d.split, d.changed, d.explanation, settings.name,
                                            est[job].slowdown)
                old = by_job[job].split
                parts.append(JobDecisionRecord(job, old.batch_sizes if old else (), tuple(d.split), est[job].slowdown,
                                               float(d.numbers.get("sd_at_lp_rate", 0.0)), changed, d.explanation))
        await self._state.put(self._keys.queue(), {"decided_unix_s": now,
                                                   "entries": [e.to_json() for e in queue.values()]})
        written = sum(p.changed for p in parts)
        sds = [e.slowdown for e in est.values() if e.included and e.slowdown > 0]
        levers = "" if settings.shares != "paced" else f" ({settings.queue} queue, paced, {len(queue)} waiting)"
        summary = (f"{settings.name}{levers}: {len(parts)} jobs decided, {written} re-split; "
                   f"max SD {max(sds, default=0):.2f}, mean SD {sum(sds) / len(sds) if sds else 0:.2f}")
        record = DecisionRecord(settings.name, self._clock(), duration, summary, tuple(parts))
        await self._state.put(self._keys.decision(), record.pack())
        self.rounds += 1
        result = RoundResult(record, written, waits)
        for listener in self.round_listeners:
            listener(result)
        return result

    async def _place(self, plan: RoundPlan, fleet: Fleet, now: float) -> tuple[float, ...]:
        """Record where the round placed waiting submissions (their submitters start them);
        how long each waited."""
        waits = []
        for job, devices in plan.admitted.items():
            sub = fleet.submissions.get(job)
            if sub is None:
                continue
            note = plan.placed.get(job)
            sd = -1.0 if note is None or note.predicted_sd == float("inf") else note.predicted_sd
            why = "" if note is None else f"{note.how}; neighbours: {', '.join(note.neighbours) or 'none'}"
            try:
                await self.submissions.place(sub, devices, self._clock(), sd, why)
                waits.append(max(now - sub.submitted_unix_s, 0.0))
                logger.info("placed %s on %s (%s)", job, ", ".join(devices), why)
            except StaleVersion:
                logger.info("submission %s changed concurrently; placed next round", job)
        return tuple(waits)

    async def _pace(self, view: JobView, plan: RoundPlan, shares: tuple[float, ...], queued: LiveQueueEntry | None,
                    settings: PolicySettings, slowdown: float) -> JobDecisionRecord:
        """Write a job's paced shares (and the split planned with them) when they moved."""
        job, old = view.spec.job_id, view.split
        # A sliver stays a sliver: a rank told 0 holds its whole job (`client.splits`).
        shares = tuple(max(round(x, 3), 0.001) if x > 0 else 0.0 for x in shares)
        planned = plan.splits.get(job)
        if planned is None and not is_held(shares):  # given its GPUs while the plan held it (live_shares)
            caps = [r.max_batch or None for r in sorted(view.spec.ranks, key=lambda r: r.rank)]
            planned = round_split([1.0] * len(caps), view.spec.global_batch, caps)
        sizes = view.pinned or planned or (old.batch_sizes if old else ())
        held = is_held(shares)
        # Shares are planned with their split: a paced rank kept on an older split
        # would hold for work it does not have (a 4-sample sliver paced as a 1-sample
        # one held ~0.8 s a step, and its job's other GPU idled at the all-reduce).
        paced = not held and min(shares, default=1.0) < 0.99 and planned is not None and not view.pinned
        if old is not None and not paced and moved_fraction(old.batch_sizes, sizes) < settings.min_change:
            sizes = old.batch_sizes
        if held:
            why = f"queued: {queued.describe()}" if queued else "queued: waiting for GPU time"
        elif min(shares, default=1.0) < 0.99:
            why = f"paced to {', '.join(f'{x:.0%}' for x in shares)} of its GPUs' time"
        elif job in plan.unpaced:
            why = "lends part of its GPUs' time to a held job, unpaced"
        else:
            why = "runs with its GPUs to itself"
        shares = () if not held and min(shares, default=1.0) >= 0.99 else shares
        changed = old is not None and (_shares_moved(old.shares, shares) or sizes != old.batch_sizes)
        if changed:
            changed = await self._issue(view, sizes, True, why, settings.name, slowdown, shares, force=True)
        return JobDecisionRecord(job, old.batch_sizes if old else (), tuple(sizes), slowdown, 0.0, changed, why)

    async def _issue(self, view: JobView, sizes: tuple[int, ...], changed: bool, why: str, policy: str,
                     slowdown: float, shares: tuple[float, ...] = (),
                     force: bool = False) -> bool:
        """Write a job's new split (and paced shares) as the next version; False if it is
        unchanged or lost a race."""
        old = view.split
        if not changed or old is None or (tuple(sizes) == old.batch_sizes and not force):
            return False
        # Apply step 0: the ranks' next agreement (`client.splits`), at the first step
        # none of them has loaded, about a tenth of a second away. A step dated ahead
        # kept a GPU that a finished neighbour had freed idle for that lead, and a
        # held job never reaches a later step.
        split = Split(old.version + 1, 0, tuple(sizes), policy, why[:500], self._clock(), slowdown, tuple(shares))
        try:
            await self._registry.write_split(view.spec.job_id, split)
            return True
        except StaleVersion:
            logger.info("split of %s changed concurrently; skipped this round", view.spec.job_id)
            return False

    async def queue(self) -> tuple[float, list[LiveQueueEntry]]:
        """The latest round's queue as stored in etcd (any replica can show it)."""
        stored = await self._state.get(self._keys.queue())
        if stored is None:
            return 0.0, []
        return float(stored.value.get("decided_unix_s", 0.0)), [LiveQueueEntry.from_json(e) for e in stored.value.get("entries", [])]

    async def last_decision(self) -> DecisionRecord | None:
        """The latest round as stored in etcd (any replica can explain it)."""
        stored = await self._state.get(self._keys.decision())
        return None if stored is None else DecisionRecord.unpack(stored.value)
