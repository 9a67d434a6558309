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

from gpufair.common.errors import AlreadyExists, NotFound, Unavailable
from gpufair.common.keys import Keys
from gpufair.common.state import Json, StaleVersion, StateStore
from gpufair.common.watchcache import PrefixCache
from gpufair.scheduler.jobindex import JobIndex, JobView
from gpufair.scheduler.jobs import JobSpec, Split

__all__ = ["HISTORY_KEEP", "JobRegistry", "JobView"]

logger = logging.getLogger(__name__)

HISTORY_KEEP = 200
MIRROR_WAIT_S = 5.0


class JobRegistry:
    def __init__(self, state: StateStore, keys: Keys, *, on_split: Callable[[str, Split], None] | None = None,
                 on_removed: Callable[[str], None] | None = None) -> None:
        self._state, self._keys = state, keys
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

    async def register(self, spec: JobSpec, initial: tuple[int, ...], policy: str) -> JobView:
        """Create the job (idempotent for an identical spec); returns it as this
        replica's mirror sees it, with its current split."""
        key = self._keys.job_spec(spec.job_id)
        revision = await self._state.create_if_absent(key, spec.to_json())
        if not revision:
            stored = await self._state.get(key)
            if stored is not None and JobSpec.from_json(stored.value) != spec:
                raise AlreadyExists(f"job {spec.job_id!r} is already registered with a different spec; deregister it first")
            revision = stored.mod_revision if stored else 0
        current = await self._state.get(self._keys.job_split(spec.job_id))
        if current is not None:
            revision = max(revision, current.mod_revision)
        else:
            # Versions start at the registration time in ms, so a job deregistered and
            # registered again never reuses a version its trainers have already seen.
            split = Split(int(time.time() * 1000), 0, initial, policy, "initial split at registration", time.time())
            try:
                revision = max(revision, await self.write_split(spec.job_id, split))
            except StaleVersion:  # a concurrent registration wrote it first
                stored_split = await self._state.get(self._keys.job_split(spec.job_id))
                revision = max(revision, stored_split.mod_revision if stored_split else 0)
        await self.wait_seen(revision)
        return self.view(spec.job_id)

    async def deregister(self, job: str) -> bool:
        """Remove the job and its history; returns once this replica's mirror has seen it go."""
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
                          "pinned by an operator", time.time())
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
        value = {"rank": rank, "replica": identity, "stream": uuid.uuid4().hex, "since": time.time()}
        await self._state.put_live(self._keys.job_member(job, rank), value)
        return value

    async def leave(self, job: str, rank: int, joined: Json) -> None:
        """Unmark a rank, unless it has reconnected since (its newer stream owns the key)."""
        await self._state.delete_live(self._keys.job_member(job, rank), joined)
