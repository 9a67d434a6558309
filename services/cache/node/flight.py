"""One dataset fetch end to end: manifest, reservation, admission, download, commit, retries."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from gpufair.common.uris import DatasetUri

from . import disk
from .errors import IntegrityError, ObjectChanged
from .fetcher import Fetcher
from .gate import PriorityGate
from .index import Entry
from .status import Manifest

logger = logging.getLogger(__name__)


class FlightRunner:
    """Fetches a dataset into a staging dir and renames it into place once verified.

    A changed object or a verification failure restarts the whole dataset from a
    fresh listing (up to `retries` times), so no attempt ever mixes versions.
    """

    def __init__(self, root: Path, fetcher: Fetcher, gate: PriorityGate, retries: int,
                 pool: concurrent.futures.Executor, reserve: Callable[[Entry, int], Awaitable[None]],
                 is_current: Callable[[Entry], bool], now: Callable[[], float]) -> None:
        self.root = root
        self.fetcher = fetcher
        self.gate = gate
        self.retries = retries
        self.pool = pool
        self.reserve = reserve
        self.is_current = is_current
        self.now = now

    async def run(self, e: Entry, ds: DatasetUri) -> disk.EntryMeta:
        """Fetch `ds` for entry `e`; bytes are reserved before the download is admitted."""
        t = e.tracker
        assert t is not None
        for attempt in range(self.retries + 1):
            manifest: Manifest = await self._in_pool(self.fetcher.source.manifest, ds)
            t.reset(manifest.total_bytes, len(manifest.objects))
            await self.reserve(e, manifest.total_bytes)  # may raise ResourceExhausted
            t.planned = True
            t.notify()
            await self.gate.acquire(e.priority, e.deadline)
            try:
                return await self._download(e, manifest)
            except (ObjectChanged, IntegrityError) as exc:
                if attempt == self.retries:
                    raise
                logger.warning("fetch of %s: %s; retrying (%d/%d)", e.uri, exc, attempt + 1, self.retries)
            finally:
                self.gate.release()
        raise AssertionError("unreachable")

    async def _download(self, e: Entry, manifest: Manifest) -> disk.EntryMeta:
        assert e.tracker is not None
        staging = await self._in_pool(disk.new_staging, self.root, e.entry_id)
        try:
            levels = await self.fetcher.fetch(manifest, staging / disk.DATA_NAME, e.tracker)
            files = tuple(disk.FileMeta(o.rel, o.key, o.size, o.etag, levels[o.rel]) for o in manifest.objects)
            now = self.now()
            meta = disk.EntryMeta(e.uri, e.entry_id, manifest.is_prefix, files, now, now)
            if not self.is_current(e):
                raise asyncio.CancelledError()  # evicted while fetching
            await self._commit(staging, meta)
            e.last_use = now
            return meta
        except BaseException:
            await asyncio.shield(self._in_pool(disk.remove_tree, staging))
            raise

    async def _commit(self, staging: Path, meta: disk.EntryMeta) -> None:
        """Rename into place; a cancel mid-rename waits for it and then takes the entry back out."""
        fut = asyncio.ensure_future(self._in_pool(disk.commit, self.root, staging, meta))
        try:
            await asyncio.shield(fut)
        except asyncio.CancelledError:
            await asyncio.gather(fut, return_exceptions=True)
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                await self._in_pool(disk.remove_if_meta, self.root, meta)
            raise

    async def _in_pool(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)
