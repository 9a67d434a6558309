"""The leader's decision round: inputs -> policy core -> versioned splits in etcd."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gpufair.common.errors import Unavailable
from gpufair.common.etcd import EtcdState, StaleVersion, stop_task
from gpufair.common.keys import Keys
from gpufair.common.leader import LeaderElection
from gpufair.scheduler.jobs import Split
from gpufair.scheduler.policy import PolicyConfig, WarmStart, decide
from gpufair.scheduler.registry import JobRegistry
from gpufair.scheduler.snapshot import JobEstimate, JobMetrics, Profiles, build_snapshot
from gpufair.scheduler.sources import PolicyStore

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoundResult:
    record: dict  # the Decision as stored for "explain"
    written: int


# The round's record holds every job's explanation, ~425 bytes a job: as
# plain JSON, ~3,700 jobs would pass etcd's 1.5 MiB request limit, and every
# round writes it into etcd's history. Compressed it is ~4x smaller. The
# plain fields stay, with "jobs" empty, so a replica of the previous version
# (mid-upgrade) reads a round without its jobs rather than failing.
_PACKED = "zlib_b64"
_MAX_RECORD = 64 * 1024 * 1024


def pack_record(record: dict) -> dict:
    """The decision record as stored in etcd: its jobs compressed."""
    raw = json.dumps(record["jobs"], separators=(",", ":")).encode()
    return {**record, "jobs": [], _PACKED: base64.b64encode(zlib.compress(raw, 6)).decode("ascii")}


def unpack_record(value: dict) -> dict | None:
    """The record `pack_record` stored (a plain one as earlier versions
    wrote it passes through); None if the stored jobs are corrupt."""
    if _PACKED not in value:
        return value
    try:
        inflate = zlib.decompressobj()
        raw = inflate.decompress(base64.b64decode(value[_PACKED], validate=True), _MAX_RECORD)
        jobs = json.loads(raw) if not inflate.unconsumed_tail else None
    except (ValueError, zlib.error):  # binascii.Error and JSONDecodeError are ValueErrors
        jobs = None
    if not isinstance(jobs, list):
        logger.warning("the stored decision record is corrupt or too large; ignoring it")
        return None
    return {k: v for k, v in value.items() if k != _PACKED} | {"jobs": jobs}


def apply_step_for(metrics: JobMetrics | None, global_batch: int, lead_s: float) -> int:
    """A step far enough ahead that every rank can get the command before it."""
    if metrics is None or metrics.last_step < 0:
        return 0
    steps_per_s = metrics.samples_per_s / global_batch if global_batch else 0.0
    return metrics.last_step + max(2, math.ceil(steps_per_s * lead_s))


class DecisionLoop:
    def __init__(self, state: EtcdState, keys: Keys, registry: JobRegistry, election: LeaderElection, policies: PolicyStore,
                 fetch_metrics: Callable[[], Awaitable[dict[str, JobMetrics]]], fetch_profiles: Callable[[], Awaitable[Profiles]],
                 *, lead_s: float = 0.5, clock: Callable[[], float] = time.time) -> None:
        self._state, self._keys, self._registry, self._election = state, keys, registry, election
        self._policies, self._fetch_metrics, self._fetch_profiles = policies, fetch_metrics, fetch_profiles
        self._lead_s, self._clock = lead_s, clock
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0
        self.latest: dict[str, JobEstimate] = {}  # per-job numbers of the latest round (leader only)
        self._profiles: Profiles = {}  # the last profiles read, for reads while etcd is unreachable
        self._warm = WarmStart()  # sd-maxmin's LP bases from the last round: rounds run one at a time

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="decision-loop")

    async def stop(self) -> None:
        await stop_task(self._task)

    async def _run(self) -> None:
        while True:
            period = 5.0
            try:
                settings = await self._policies.get()
                period = settings.period_s
                if self._election.is_leader:
                    await self.run_round()
            except asyncio.CancelledError:
                raise
            except Unavailable as exc:
                logger.warning("decision round skipped: %s", exc)
            except Exception:  # noqa: BLE001 - one bad round must not stop the loop
                logger.exception("decision round failed")
            await asyncio.sleep(period)

    async def estimates(self) -> dict[str, JobEstimate]:
        """Current per-job numbers (for admin reads on any replica)."""
        metrics = await self._safe_metrics()
        _, est = build_snapshot(self._registry.views(), metrics, await self._safe_profiles(), self._clock())
        return est

    async def _safe_profiles(self) -> Profiles:
        # Reads serve the last good state during an etcd outage (the job mirror does the same).
        try:
            self._profiles = await self._fetch_profiles()
        except Unavailable as exc:
            logger.info("profiles unavailable, using the last ones read: %s", exc)
        return self._profiles

    async def _safe_metrics(self) -> dict[str, JobMetrics]:
        try:
            return await self._fetch_metrics()
        except Unavailable as exc:
            logger.info("metrics unavailable: %s", exc)
            return {}

    async def run_round(self) -> RoundResult:
        settings = await self._policies.get()
        metrics = await self._fetch_metrics()
        views = self._registry.views()
        cluster, est = build_snapshot(views, metrics, await self._fetch_profiles(), self._clock())
        self.latest = est
        t0 = time.perf_counter()
        decisions = await asyncio.to_thread(decide, cluster, settings.name, PolicyConfig(min_change=settings.min_change),
                                            self._warm)
        duration = time.perf_counter() - t0
        written, parts = 0, []
        by_job = {v.spec.job_id: v for v in views}
        for job, d in decisions.items():
            view = by_job[job]
            old = view.split
            part = {"job_id": job, "old": list(old.batch_sizes) if old else [], "new": list(d.split), "slowdown": est[job].slowdown,
                    "predicted_slowdown": float(d.numbers.get("sd_at_lp_rate", 0.0)), "changed": False, "explanation": d.explanation}
            if d.changed and old is not None and d.split != old.batch_sizes:
                split = Split(old.version + 1, apply_step_for(metrics.get(job), view.spec.global_batch, self._lead_s), d.split,
                              settings.name, d.explanation[:500], self._clock(), est[job].slowdown)
                try:
                    await self._registry.write_split(job, split)
                    part["changed"], written = True, written + 1
                except StaleVersion:
                    logger.info("split of %s changed concurrently; skipped this round", job)
            parts.append(part)
        sds = [e.slowdown for e in est.values() if e.included and e.slowdown > 0]
        summary = (f"{settings.name}: {len(decisions)} jobs decided, {written} re-split; "
                   f"max SD {max(sds, default=0):.2f}, mean SD {sum(sds) / len(sds) if sds else 0:.2f}")
        record = {"policy": settings.name, "decided_unix_s": self._clock(), "duration_s": duration, "summary": summary, "jobs": parts}
        await self._state.put(self._keys.decision(), pack_record(record))
        self.rounds += 1
        return RoundResult(record, written)

    async def last_decision(self) -> dict | None:
        """The latest round as stored in etcd (any replica can explain it)."""
        stored = await self._state.get(self._keys.decision())
        return None if stored is None else unpack_record(stored.value)
