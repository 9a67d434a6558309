"""The job registry in etcd: specs, versioned splits, history, pins and members.

Every replica mirrors the jobs prefix (`PrefixCache`) and keeps it indexed by
job (`JobIndex`), so reads and command streams are served locally in time
proportional to what they return; writes go to etcd in one transaction each
and come back through the watch, and a writer waits for the mirror to reach
its own write's revision before it reads.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

from gpufair.common.errors import AlreadyExists, FailedPrecondition, NotFound, Unavailable
from gpufair.common.keys import Keys
from gpufair.common.state import Json, StaleVersion, StateStore
from gpufair.common.watchcache import PrefixCache
from gpufair.scheduler.jobindex import JobIndex, JobView
from gpufair.scheduler.jobs import JobSpec, Split, is_held
from gpufair.scheduler.lifecycle import JobLife, Phase, ended, new_life, started

__all__ = ["HISTORY_KEEP", "JobRegistry", "JobView"]

logger = logging.getLogger(__name__)

HISTORY_KEEP = 200
MIRROR_WAIT_S = 5.0


class JobRegistry:
    def __init__(self, state: StateStore, keys: Keys, *, on_split: Callable[[str, Split], None] | None = None,
                 on_removed: Callable[[str], None] | None = None, clock: Callable[[], float] = time.time) -> None:
        self._state, self._keys, self._clock = state, keys, clock
        self._index = JobIndex(keys.jobs_prefix(), on_split=on_split, on_removed=on_removed)
        self._cache = PrefixCache(state, keys.jobs_prefix(), on_change=self._index.apply)

    def start_background(self) -> None:
        """Mirror the jobs prefix; `ready` turns true after the first full read."""
        self._cache.start()

    @property
    def ready(self) -> bool:
        return self._cache.ready

    async def wait_ready(self, timeout: float = 10.0) -> bool:
        return await self._cache.wait_ready(timeout)

    async def stop(self) -> None:
        await self._cache.stop()

    # --- reads (local mirror) ----------------------------------------------

    def _check_ready(self) -> None:
        if not self.ready:
            raise Unavailable("the scheduler has not read the job registry from etcd yet; retry")

    def job_ids(self) -> list[str]:
        return self._index.job_ids()

    def view(self, job: str) -> JobView:
        self._check_ready()
        view = self._index.view(job)
        if view is None:
            raise NotFound(f"job {job!r} is not registered")
        return view

    def views(self) -> list[JobView]:
        """Every registered job, sorted by id."""
        return self._index.views()

    def split(self, job: str) -> Split | None:
        return self._index.split(job)

    async def history(self, job: str, limit: int) -> list[Split]:
        values, _ = await self._state.get_prefix(self._keys.job_history_prefix(job))
        entries = [Split.from_json(v.value) for _, v in sorted(values.items(), reverse=True)]
        return entries[:limit]

    async def wait_seen(self, revision: int) -> None:
        """Wait until the local mirror holds the write made at `revision` (reads follow own writes)."""
        if not await self._cache.wait_revision(revision, MIRROR_WAIT_S):
            raise Unavailable(f"this scheduler replica's view of etcd is behind (revision {revision} "
                              f"not seen within {MIRROR_WAIT_S:g}s); retry")

    # --- writes --------------------------------------------------------------

    async def register(self, spec: JobSpec, initial: tuple[int, ...], policy: str, *,
                       shares: tuple[float, ...] = (), arrival: float | None = None) -> JobView:
        """Create the job (idempotent for an identical spec while it is active; a job
        that has ended starts a new life); returns it as this replica's mirror sees it.
        `shares` are its first paced shares (all 0: it waits to be admitted);
        `arrival` when it arrived (its submission, less its start-up: `fleetview`), default now."""
        job = spec.job_id
        life_key = self._keys.job_life(job)
        stored_life = await self._state.get(life_key)
        revision = 0
        if stored_life is not None and not JobLife.from_json(stored_life.value).active:
            revision = await self._new_life(spec, initial, policy, JobLife.from_json(stored_life.value),
                                            shares, arrival)
        key = self._keys.job_spec(job)
        created = await self._state.create_if_absent(key, spec.to_json())
        revision = max(revision, created)
        if not created:
            stored = await self._state.get(key)
            if stored is not None and JobSpec.from_json(stored.value) != spec:
                raise AlreadyExists(f"job {job!r} is already registered with a different spec; remove it first (gpufair job rm)")
            revision = max(revision, stored.mod_revision if stored else 0)
        current = await self._state.get(self._keys.job_split(job))
        if current is not None:
            revision = max(revision, current.mod_revision)
            first = int(current.value.get("version", 0))
        else:
            first = await self._first_split(job, initial, policy, 0, shares)
        if stored_life is None:
            life = new_life(self._clock() if arrival is None else arrival, first)
            revision = max(revision, await self._state.create_if_absent(life_key, life.to_json()))
        await self.wait_seen(revision)
        return self.view(job)

    async def _first_split(self, job: str, initial: tuple[int, ...], policy: str, after: int,
                           shares: tuple[float, ...] = ()) -> int:
        """Write a life's first split; returns its version. Versions start at the
        registration time in ms (and above any earlier life's), so trainers of an
        earlier life never see a version they already know."""
        why = "initial split at registration" + ("; queued: waiting for GPU time" if is_held(shares) else "")
        split = Split(max(int(self._clock() * 1000), after + 1), 0, initial, policy, why, self._clock(), shares=shares)
        try:
            await self.write_split(job, split)
            return split.version
        except StaleVersion:  # a concurrent registration wrote it first
            stored = await self._state.get(self._keys.job_split(job))
            return int(stored.value["version"]) if stored else split.version

    async def _new_life(self, spec: JobSpec, initial: tuple[int, ...], policy: str, old: JobLife,
                        shares: tuple[float, ...] = (), arrival: float | None = None) -> int:
        """Replace an ended job's record with a new life (its old history and pin go)."""
        job = spec.job_id
        await self._state.delete_prefix(self._keys.job_history_prefix(job))
        await self._state.delete(self._keys.job_pin(job))
        stored = await self._state.get(self._keys.job_split(job))
        first = await self._first_split(job, initial, policy, int(stored.value["version"]) if stored else 0, shares)
        life = new_life(self._clock() if arrival is None else arrival, first, old.version + 1)
        try:
            return await self._state.put_versioned(self._keys.job_life(job), life.to_json(),
                                                   also={self._keys.job_spec(job): spec.to_json()})
        except StaleVersion:
            return 0  # a concurrent registration started the new life first; the caller compares specs

    async def transition(self, job: str, change: Callable[[JobLife], JobLife | None], *, retries: int = 5) -> JobLife | None:
        """Apply `change` to the job's stored life by compare-and-swap; returns the new
        life, or None if `change` left it as it was (or the job has no life)."""
        for _ in range(retries):
            stored = await self._state.get(self._keys.job_life(job))
            if stored is None:
                return None
            new = change(JobLife.from_json(stored.value))
            if new is None:
                return None
            try:
                await self.wait_seen(await self._state.put_versioned(self._keys.job_life(job), new.to_json()))
                return new
            except StaleVersion:
                continue  # another replica changed it in between: decide again on the newer life
        raise Unavailable(f"could not record the life of {job!r}: too many concurrent writes")

    async def end(self, job: str, phase: Phase, reason: str, samples: int, exclusive_rate: float) -> JobLife | None:
        """End an active job (its streams close, its pin goes); None if it had already ended."""
        now = self._clock()
        life = await self.transition(job, lambda old: ended(old, phase, now, reason, samples, exclusive_rate))
        if life is not None:
            await self._state.delete(self._keys.job_pin(job))
        return life

    async def mark_started(self, job: str) -> None:
        """A rank joined: a queued job is running from now (the start its slow-down counts from)."""
        view = self._index.view(job)
        if view is not None and view.life is not None and view.life.phase is not Phase.QUEUED:
            return  # the usual case: no etcd read (a mirror behind its write reads etcd below)
        now = self._clock()
        await self.transition(job, lambda old: started(old, now))

    def check_active(self, view: JobView) -> None:
        if not view.active:
            assert view.life is not None
            raise FailedPrecondition(f"job {view.spec.job_id!r} has ended ({view.life.phase.value}); "
                                     "register it again to start a new run")

    async def purge(self, job: str) -> bool:
        """Remove the job's record and history; returns once this replica's mirror has seen it go."""
        existed = await self._state.get(self._keys.job_spec(job)) is not None
        revision = await self._state.delete_prefix(self._keys.job_prefix(job))
        await self._state.delete_prefix(self._keys.job_history_prefix(job))
        if revision:
            await self.wait_seen(revision)
        return existed

    async def write_split(self, job: str, split: Split) -> int:
        """One transaction: the versioned split (never backwards), its history
        entry, and the pruning of history older than the newest HISTORY_KEEP
        versions (split versions go up by one). Returns the write's revision."""
        prefix = self._keys.job_history_prefix(job)
        oldest_kept = self._keys.job_history(job, max(split.version - HISTORY_KEEP + 1, 0))
        return await self._state.put_versioned(self._keys.job_split(job), split.to_json(),
                                               also={self._keys.job_history(job, split.version): split.to_json()},
                                               delete_range=(prefix, oldest_kept))

    async def pin(self, job: str, sizes: tuple[int, ...], *, retries: int = 5) -> Split:
        """Pin a manual split and issue it as the next version (read from etcd, not the
        mirror); returns once this replica's mirror holds it."""
        await self.set_pin(job, sizes)
        for _ in range(retries):
            stored = await self._state.get(self._keys.job_split(job))
            current = Split.from_json(stored.value) if stored else None
            split = Split((current.version if current else 0) + 1, current.apply_step if current else 0, sizes, "manual",
                          "pinned by an operator", self._clock())
            try:
                await self.wait_seen(await self.write_split(job, split))
                return split
            except StaleVersion:
                continue  # the leader wrote a split in between: take the next version
        raise Unavailable(f"could not issue the pinned split of {job!r}: too many concurrent writes")

    async def set_pin(self, job: str, sizes: tuple[int, ...] | None) -> bool:
        """Pin `sizes` or (None) release; False if there was no pin to release. Returns
        once this replica's mirror holds the change."""
        key = self._keys.job_pin(job)
        revision = await self._state.put(key, {"batch_sizes": list(sizes)}) if sizes is not None else await self._state.delete(key)
        if revision:
            await self.wait_seen(revision)
        return bool(revision)

    async def join(self, job: str, rank: int, identity: str) -> Json:
        """Mark a rank live (under this replica's lease); returns the value, which `leave` needs."""
        value = {"rank": rank, "replica": identity, "stream": uuid.uuid4().hex, "since": self._clock()}
        await self._state.put_live(self._keys.job_member(job, rank), value)
        await self.mark_started(job)
        return value

    async def leave(self, job: str, rank: int, joined: Json) -> None:
        """Unmark a rank, unless it has reconnected since (its newer stream owns the key)."""
        await self._state.delete_live(self._keys.job_member(job, rank), joined)
