"""The job registry in etcd: specs, versioned splits, history, pins and members.

Every replica mirrors the jobs prefix (`PrefixCache`), so reads and command
streams are served locally; writes go to etcd and come back through the watch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpufair.common.errors import AlreadyExists, NotFound
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


class JobRegistry:
    def __init__(self, state: EtcdState, keys: Keys, *, on_split: Callable[[str, Split], None] | None = None) -> None:
        self._state, self._keys = state, keys
        self._on_split = on_split
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
        if value is not None and key.endswith("/split") and self._on_split:
            job = key[len(self._keys.jobs_prefix()):].split("/", 1)[0]
            self._on_split(job, Split.from_json(value))

    # --- reads (local mirror) ----------------------------------------------

    def _get(self, key: str) -> Json | None:
        return self._cache.values.get(key)

    def job_ids(self) -> list[str]:
        prefix = self._keys.jobs_prefix()
        return sorted({k[len(prefix):].split("/", 1)[0] for k in self._cache.values if k.endswith("/spec")})

    def view(self, job: str) -> JobView:
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
        split = Split(1, 0, initial, policy, "initial split at registration", time.time())
        try:
            await self.write_split(spec.job_id, split)
        except StaleVersion:
            pass  # a concurrent registration wrote it first
        stored_split = await self._state.get(self._keys.job_split(spec.job_id))
        return spec, Split.from_json(stored_split.value) if stored_split else split

    async def deregister(self, job: str) -> bool:
        existed = await self._state.get(self._keys.job_spec(job)) is not None
        await self._state.delete_prefix(self._keys.job_prefix(job))
        return existed

    async def write_split(self, job: str, split: Split) -> None:
        """Versioned write (never backwards) plus a history entry."""
        await self._state.put_versioned(self._keys.job_split(job), split.to_json())
        await self._state.put(self._keys.job_history(job, split.version), split.to_json())

    async def set_pin(self, job: str, sizes: tuple[int, ...] | None) -> bool:
        key = self._keys.job_pin(job)
        if sizes is None:
            return await self._state.delete(key)
        await self._state.put(key, {"batch_sizes": list(sizes)})
        return True

    async def join(self, job: str, rank: int, identity: str) -> None:
        await self._state.put_live(self._keys.job_member(job, rank), {"rank": rank, "replica": identity, "since": time.time()})

    async def leave(self, job: str, rank: int) -> None:
        await self._state.delete_live(self._keys.job_member(job, rank))
