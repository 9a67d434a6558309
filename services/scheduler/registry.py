"""The job registry in etcd: specs, versioned splits, history, pins and members.

Every replica mirrors the jobs prefix (`PrefixCache`), so reads and command
streams are served locally; writes go to etcd and come back through the watch.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from gpufair.common.errors import AlreadyExists, NotFound, Unavailable
from gpufair.common.etcd import EtcdState, Json, StaleVersion
from gpufair.common.keys import Keys
from gpufair.common.watchcache import PrefixCache
from gpufair.scheduler.jobs import JobSpec, Split

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobView:
    """What the registry knows of one job right now."""

    spec: JobSpec
    split: Split | None
    pinned: tuple[int, ...] | None
    live_ranks: int


HISTORY_KEEP = 200


class JobRegistry:
    def __init__(self, state: EtcdState, keys: Keys, *, on_split: Callable[[str, Split], None] | None = None,
                 on_removed: Callable[[str], None] | None = None) -> None:
        self._state, self._keys = state, keys
        self._on_split, self._on_removed = on_split, on_removed
        self._cache = PrefixCache(state, keys.jobs_prefix(), on_change=self._changed)

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

    def _changed(self, key: str, value: Json | None) -> None:
        job = key[len(self._keys.jobs_prefix()):].split("/", 1)[0]
        if value is not None and key.endswith("/split") and self._on_split:
            self._on_split(job, Split.from_json(value))
        elif value is None and key.endswith("/spec") and self._on_removed:
            self._on_removed(job)

    # --- reads (local mirror) ----------------------------------------------

    def _get(self, key: str) -> Json | None:
        return self._cache.values.get(key)

    def job_ids(self) -> list[str]:
        prefix = self._keys.jobs_prefix()
        return sorted({k[len(prefix):].split("/", 1)[0] for k in self._cache.values if k.endswith("/spec")})

    def view(self, job: str) -> JobView:
        if not self.ready:
            raise Unavailable("the scheduler has not read the job registry from etcd yet; retry")
        spec = self._get(self._keys.job_spec(job))
        if spec is None:
            raise NotFound(f"job {job!r} is not registered")
        split = self._get(self._keys.job_split(job))
        pin = self._get(self._keys.job_pin(job))
        members = self._keys.job_members_prefix(job)
        live = sum(1 for k in self._cache.values if k.startswith(members))
        return JobView(JobSpec.from_json(spec), Split.from_json(split) if split else None,
                       tuple(pin["batch_sizes"]) if pin else None, live)

    def views(self) -> list[JobView]:
        out = []
        for job in self.job_ids():
            try:
                out.append(self.view(job))
            except NotFound:
                continue  # removed between listing and reading
        return out

    def split(self, job: str) -> Split | None:
        raw = self._get(self._keys.job_split(job))
        return Split.from_json(raw) if raw else None

    async def history(self, job: str, limit: int) -> list[Split]:
        values, _ = await self._state.get_prefix(self._keys.job_history_prefix(job))
        entries = [Split.from_json(v.value) for _, v in sorted(values.items(), reverse=True)]
        return entries[:limit]

    # --- writes --------------------------------------------------------------

    async def wait_view(self, job: str, timeout: float = 5.0) -> JobView:
        """The job as the local mirror sees it once its split arrived (reads follow own writes)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                view = self.view(job)
                if view.split is not None or time.monotonic() > deadline:
                    return view
            except NotFound:
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.02)

    async def register(self, spec: JobSpec, initial: tuple[int, ...], policy: str) -> tuple[JobSpec, Split]:
        """Create the job (idempotent for an identical spec); returns its current split."""
        key = self._keys.job_spec(spec.job_id)
        if not await self._state.create_if_absent(key, spec.to_json()):
            stored = await self._state.get(key)
            if stored is not None and JobSpec.from_json(stored.value) != spec:
                raise AlreadyExists(f"job {spec.job_id!r} is already registered with a different spec; deregister it first")
        current = await self._state.get(self._keys.job_split(spec.job_id))
        if current is not None:
            return spec, Split.from_json(current.value)
        # Versions start at the registration time in ms, so a job deregistered and
        # registered again never reuses a version its trainers have already seen.
        split = Split(int(time.time() * 1000), 0, initial, policy, "initial split at registration", time.time())
        try:
            await self.write_split(spec.job_id, split)
        except StaleVersion:
            pass  # a concurrent registration wrote it first
        stored_split = await self._state.get(self._keys.job_split(spec.job_id))
        return spec, Split.from_json(stored_split.value) if stored_split else split

    async def deregister(self, job: str) -> bool:
        existed = await self._state.get(self._keys.job_spec(job)) is not None
        await self._state.delete_prefix(self._keys.job_prefix(job))
        await self._state.delete_prefix(self._keys.job_history_prefix(job))
        return existed

    async def write_split(self, job: str, split: Split) -> None:
        """Versioned write (never backwards) plus a history entry; old history is pruned."""
        await self._state.put_versioned(self._keys.job_split(job), split.to_json())
        await self._state.put(self._keys.job_history(job, split.version), split.to_json())
        values, _ = await self._state.get_prefix(self._keys.job_history_prefix(job))
        for key in sorted(values)[:-HISTORY_KEEP]:
            await self._state.delete(key)

    async def pin(self, job: str, sizes: tuple[int, ...], *, retries: int = 5) -> Split:
        """Pin a manual split and issue it as the next version (read from etcd, not the mirror)."""
        await self.set_pin(job, sizes)
        for _ in range(retries):
            stored = await self._state.get(self._keys.job_split(job))
            current = Split.from_json(stored.value) if stored else None
            split = Split((current.version if current else 0) + 1, current.apply_step if current else 0, sizes, "manual",
                          "pinned by an operator", time.time())
            try:
                await self.write_split(job, split)
                return split
            except StaleVersion:
                continue  # the leader wrote a split in between: take the next version
        raise Unavailable(f"could not issue the pinned split of {job!r}: too many concurrent writes")

    async def set_pin(self, job: str, sizes: tuple[int, ...] | None) -> bool:
        key = self._keys.job_pin(job)
        if sizes is None:
            return await self._state.delete(key)
        await self._state.put(key, {"batch_sizes": list(sizes)})
        return True

    async def join(self, job: str, rank: int, identity: str) -> Json:
        """Mark a rank live (under this replica's lease); returns the value, which `leave` needs."""
        value = {"rank": rank, "replica": identity, "stream": uuid.uuid4().hex, "since": time.time()}
        await self._state.put_live(self._keys.job_member(job, rank), value)
        return value

    async def leave(self, job: str, rank: int, joined: Json) -> None:
        """Unmark a rank, unless it has reconnected since (its newer stream owns the key)."""
        await self._state.delete_live(self._keys.job_member(job, rank), joined)
