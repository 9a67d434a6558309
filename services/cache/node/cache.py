"""NodeCache: the node-local dataset cache (single flight, capacity, pins, recovery)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path

from gpufair.common.errors import FailedPrecondition, GpufairError, InvalidArgument, NotFound, Unavailable
from gpufair.common.uris import DatasetUri, parse_dataset_uri

from . import disk
from .config import NodeCacheConfig
from .fetcher import Fetcher, FetchTracker
from .gate import PriorityGate
from .index import Entry, Index
from .flight import FlightRunner
from .publisher import EntryPublisher, MemoryPublisher, PublishQueue, entry_record
from .s3 import S3Client, S3Source, make_client
from .status import EntryState, EntryStatus
from .stream import follow_fetch, read_file

logger = logging.getLogger(__name__)

# A failed entry is reported as failed to resolve(wait=False) for this long before
# a resolve retries it, so callers see the reason instead of a retry loop.
FAILED_RETRY_S = 5.0


@dataclass(frozen=True)
class RecoveryReport:
    """What `start()` found: entries kept, temp/damaged names removed, stale etcd records dropped."""

    entries: int
    removed: tuple[str, ...]
    stale_records: int


class NodeCache:
    """Caches S3 datasets on this node's disk within a byte capacity."""

    def __init__(self, config: NodeCacheConfig, s3: S3Client | None = None,
                 publisher: EntryPublisher | None = None, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.root = Path(config.cache_dir)
        self._pool = concurrent.futures.ThreadPoolExecutor(config.max_concurrency + 2, "gpufair-cache")
        source = S3Source(s3 if s3 is not None else make_client(config), config.s3_endpoint)
        self.fetcher = Fetcher(source, self._pool, config.part_size, config.max_concurrency,
                               config.chunk_size, config.verify_etag)
        self._index = Index(config.capacity_bytes)
        self._publisher = publisher if publisher is not None else MemoryPublisher()
        self._publish: PublishQueue | None = None
        self._runner = FlightRunner(self.root, self.fetcher, PriorityGate(config.max_active_fetches),
                                    config.retries, self._pool, self._reserve, self._is_current, self._now)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._clock = clock
        self._last_clock = 0.0
        self.fetches_started = 0
        self.evictions: dict[str, int] = {}  # why ("lru", "operator", "capacity") -> datasets evicted
        self.fetch_listeners: list[Callable[[float, str], None]] = []  # (seconds, "cached"|"failed"|"cancelled") per fetch

    # lifecycle ---------------------------------------------------------------

    async def start(self) -> RecoveryReport:
        """Remove temp files, rebuild the index from disk, reconcile with etcd."""
        entries, removed = await self._in_pool(disk.recover, self.root)
        for meta in entries:
            self._index.entries[meta.entry_id] = Entry(
                meta.uri, meta.entry_id, EntryState.CACHED, meta=meta,
                path=str(disk.local_path(self.root, meta)), last_use=meta.last_use)
        self._publish = PublishQueue(self._publisher)
        try:
            remote = await self._publisher.list()
        except Unavailable as exc:
            logger.warning("cannot read cache records from etcd (%s); publishing from disk only", exc)
            remote = {}
        stale = 0
        for entry_id, rec in remote.items():
            e = self._index.entries.get(entry_id)
            if e is None:
                self._publish.put(entry_id, None)
                stale += 1
                continue
            if not isinstance(rec, dict):
                continue
            if isinstance(rec.get("last_use"), (int, float)):
                e.last_use = max(e.last_use, float(rec["last_use"]))
            owners = rec.get("pin_owners")
            for owner in owners if isinstance(owners, list) else ():
                self._index.pins.setdefault(e.uri, set()).add(str(owner))
        await self._shrink_to_capacity()
        for e in self._index.entries.values():
            self._publish_entry(e)
        self._publish.start()
        logger.info("cache at %s: %d entries, removed %d temp/damaged", self.root, len(entries), len(removed))
        return RecoveryReport(len(entries), tuple(removed), stale)

    async def close(self) -> None:
        """Stop fetches (their temp files are removed), persist last-use times, flush etcd."""
        tasks = list(self._tasks.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for e in list(self._index.entries.values()):
            if e.state is EntryState.CACHED and e.meta and e.last_use > e.meta.last_use:
                e.meta = replace(e.meta, last_use=e.last_use)
                await self._in_pool(disk.write_meta, disk.entry_dir(self.root, e.entry_id), e.meta)
        if self._publish:
            await self._publish.close()
        self._pool.shutdown(wait=True, cancel_futures=True)

    async def flush_published(self, timeout: float = 10.0) -> None:
        """Wait until etcd has every state change so far (for tests and the admin RPC)."""
        if self._publish:
            await self._publish.flush(timeout)

    # queries -----------------------------------------------------------------

    def list(self) -> list[EntryStatus]:
        """Every entry this node knows, by URI."""
        return sorted((self._index.status(e) for e in self._index.entries.values()), key=lambda s: s.uri)

    def status(self, uri: str) -> EntryStatus:
        """One dataset's state without starting anything (ABSENT when unknown)."""
        ds = parse_dataset_uri(uri)
        e = self._index.entries.get(ds.entry_id)
        if e is None:
            return EntryStatus(ds.canonical, ds.entry_id, EntryState.ABSENT,
                               pin_owners=tuple(sorted(self._index.pins.get(ds.canonical, ()))))
        return self._index.status(e)

    def usage(self) -> tuple[int, int]:
        """(bytes used incl. reservations, capacity)."""
        return self._index.used_bytes(), self._index.capacity

    # fetching ----------------------------------------------------------------

    async def prefetch(self, uri: str, priority: int = 0, deadline: float | None = None,
                       pin_owner: str | None = None) -> EntryStatus:
        """Start fetching `uri` (single flight) and return once its bytes are reserved.

        `deadline` (unix time the data is needed by) and `priority` order admission
        when more than `max_active_fetches` datasets wait; `pin_owner` pins it.

        Raises NotFound, ResourceExhausted (cannot fit even after evicting every
        unpinned entry), Unavailable (S3 down) or InvalidArgument right away.
        """
        ds = parse_dataset_uri(uri)
        if pin_owner is not None:
            self.pin(uri, pin_owner)
        e = self._ensure_fetch(ds, priority, deadline, retry_failed=True)
        if e.state is EntryState.CACHED:
            self._touch(e)  # about to be needed: keep it away from the LRU end
        await self._wait_planned(e)
        return self._index.status(e)

    async def resolve(self, uri: str, wait: bool = False, timeout: float | None = None) -> EntryStatus:
        """The dataset's local path when cached; otherwise start (or join) its fetch.

        With `wait`, block until it is cached (raising the fetch's error) or until
        `timeout` passes, then report the state with progress.
        """
        ds = parse_dataset_uri(uri)
        e = self._index.entries.get(ds.entry_id)
        if e is not None and e.state is EntryState.CACHED and self._still_on_disk(e):
            self._touch(e)
            return self._index.status(e)
        e = self._ensure_fetch(ds, 0, None, retry_failed=wait)
        if e.state is EntryState.FAILED and not wait:
            return self._index.status(e)
        if wait and e.done is not None:
            try:
                await asyncio.wait_for(asyncio.shield(e.done), timeout)
            except TimeoutError:
                return self._index.status(e)
            if e.state is EntryState.FAILED and e.error is not None:
                raise e.error
            self._touch(e)
        return self._index.status(e)

    async def stream(self, uri: str, chunk_size: int | None = None) -> AsyncIterator[bytes]:
        """Read-through: the bytes of one object, served as they land while it is cached.

        Raises (mid-stream, after bytes may have been yielded) if the fetch fails
        verification or the object changes: callers must then discard what they got.
        The iterator ends normally only once the entry is cached and verified.
        """
        ds = parse_dataset_uri(uri)
        if ds.is_prefix:
            raise InvalidArgument(f"{uri} is a prefix; read-through streams one object")
        chunk = chunk_size or self.config.chunk_size
        e = self._index.entries.get(ds.entry_id)
        if e is None or e.state is not EntryState.CACHED or not self._still_on_disk(e):
            e = self._ensure_fetch(ds, 0, None, retry_failed=True)
        if e.state is EntryState.CACHED:
            self._touch(e)
            async for buf in read_file(e.path or "", chunk, self._pool):
                yield buf
            return
        async for buf in follow_fetch(e, ds.key, chunk, self._pool):
            yield buf
        self._touch(e)

    # pins and eviction -------------------------------------------------------

    def pin(self, uri: str, owner: str) -> None:
        """Keep `uri` from LRU eviction while `owner` (e.g. a pipeline step) needs it."""
        ds = parse_dataset_uri(uri)
        if not owner or len(owner) > 253:
            raise InvalidArgument("pin owner must be 1-253 characters")
        self._index.pins.setdefault(ds.canonical, set()).add(owner)
        self._republish(ds.entry_id)

    def unpin(self, owner: str, uri: str | None = None) -> int:
        """Drop `owner`'s pins (on one URI or all); returns how many were dropped."""
        targets = [parse_dataset_uri(uri).canonical] if uri is not None else list(self._index.pins)
        dropped = 0
        for u in targets:
            owners = self._index.pins.get(u, set())
            if owner in owners:
                owners.discard(owner)
                dropped += 1
                if not owners:
                    del self._index.pins[u]
                self._republish(parse_dataset_uri(u).entry_id)
        return dropped

    async def evict(self, uri: str, force: bool = False) -> EntryStatus:
        """Remove a dataset; pinned or in-flight ones need `force`. Returns its last status."""
        ds = parse_dataset_uri(uri)
        e = self._index.entries.get(ds.entry_id)
        if e is None:
            raise NotFound(f"{ds.canonical} is not in the cache on node {self.config.node}")
        last = self._index.status(e)
        if self._index.is_pinned(e.uri) and not force:
            raise FailedPrecondition(f"{e.uri} is pinned by {', '.join(last.pin_owners)}; evict with force")
        if e.state is EntryState.FETCHING:
            if not force:
                raise FailedPrecondition(f"{e.uri} is being fetched; evict with force to cancel it")
            task = self._tasks.get(e.entry_id)
            if task:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self._drop(e, "operator")
        return last

    # internals ---------------------------------------------------------------

    def _ensure_fetch(self, ds: DatasetUri, priority: int, deadline: float | None, retry_failed: bool) -> Entry:
        e = self._index.entries.get(ds.entry_id)
        if e is not None and e.state in (EntryState.FETCHING, EntryState.CACHED):
            return e
        if e is not None and e.state is EntryState.FAILED and not retry_failed \
                and self._clock() - e.last_use < FAILED_RETRY_S:
            return e
        e = Entry(ds.canonical, ds.entry_id, EntryState.FETCHING, tracker=FetchTracker(),
                  done=asyncio.get_running_loop().create_future(), priority=priority, deadline=deadline,
                  last_use=self._now())
        self._index.entries[ds.entry_id] = e
        self.fetches_started += 1
        self._tasks[ds.entry_id] = asyncio.create_task(self._run_fetch(e, ds), name=f"fetch {ds.canonical}")
        self._publish_entry(e)
        return e

    async def _wait_planned(self, e: Entry) -> None:
        t = e.tracker
        while e.state is EntryState.FETCHING and t is not None and not t.planned:
            await t.wait_change()
        if e.state is EntryState.FAILED and e.error is not None:
            raise e.error

    async def _run_fetch(self, e: Entry, ds: DatasetUri) -> None:
        assert e.tracker is not None and e.done is not None
        t0, outcome = time.monotonic(), "failed"
        try:
            meta = await self._runner.run(e, ds)
            e.meta, e.state, e.reserved = meta, EntryState.CACHED, 0
            e.path = str(disk.local_path(self.root, meta))
            outcome = "cached"
        except asyncio.CancelledError:
            outcome = "cancelled"
            self._index.entries.pop(e.entry_id, None)
            e.state, e.reserved, e.reason = EntryState.ABSENT, 0, "fetch cancelled"
            e.error = Unavailable(f"fetch of {e.uri} was cancelled")
            self._publish_queue(e.entry_id, None)
            raise
        except GpufairError as exc:
            self._fail(e, exc)
        except Exception as exc:  # noqa: BLE001 - a bug must not wedge waiters
            logger.exception("fetch of %s failed unexpectedly", e.uri)
            self._fail(e, GpufairError(f"fetch of {e.uri} failed: internal error ({type(exc).__name__})"))
        finally:
            self._tasks.pop(e.entry_id, None)
            e.done.set_result(None)
            e.tracker.notify()
            for listener in self.fetch_listeners:
                listener(time.monotonic() - t0, outcome)
        self._publish_entry(e)

    async def _reserve(self, e: Entry, need: int) -> None:
        e.reserved = 0
        victims = self._index.victims_for(e, need)  # raises ResourceExhausted
        e.reserved = need
        for v in victims:
            logger.info("evicting %s (%d bytes, LRU) to fit %s", v.uri, v.size, e.uri)
            await self._drop(v, "lru")

    async def _drop(self, e: Entry, why: str) -> None:
        self.evictions[why] = self.evictions.get(why, 0) + 1
        if self._index.entries.get(e.entry_id) is e:
            del self._index.entries[e.entry_id]
        e.state = EntryState.ABSENT
        hidden = disk.hide_entry(self.root, e.entry_id)  # sync: a later fetch may reuse the name
        self._publish_queue(e.entry_id, None)
        await self._in_pool(disk.remove_tree, hidden)

    async def _shrink_to_capacity(self) -> None:
        over = self._index.used_bytes() - self._index.capacity
        lru = sorted((e for e in self._index.entries.values() if not self._index.is_pinned(e.uri)),
                     key=lambda e: e.last_use)
        for e in lru:
            if over <= 0:
                break
            logger.warning("cache over capacity after restart; evicting %s", e.uri)
            over -= e.size
            await self._drop(e, "capacity")

    def _fail(self, e: Entry, exc: GpufairError) -> None:
        e.state, e.reserved, e.error, e.reason = EntryState.FAILED, 0, exc, str(exc)
        e.last_use = self._now()
        logger.warning("fetch of %s failed: %s", e.uri, exc)

    def _is_current(self, e: Entry) -> bool:
        return self._index.entries.get(e.entry_id) is e

    def _still_on_disk(self, e: Entry) -> bool:
        if e.path and os.path.exists(e.path):
            return True
        logger.warning("cached files of %s disappeared; fetching again", e.uri)
        self._index.entries.pop(e.entry_id, None)
        return False

    def _touch(self, e: Entry) -> None:
        e.last_use = self._now()
        self._publish_entry(e)

    def _now(self) -> float:
        # Strictly increasing, so LRU order is exact even within one clock tick.
        self._last_clock = max(self._clock(), self._last_clock + 1e-6)
        return self._last_clock

    def _republish(self, entry_id: str) -> None:
        e = self._index.entries.get(entry_id)
        if e is not None:
            self._publish_entry(e)

    def _publish_entry(self, e: Entry) -> None:
        self._publish_queue(e.entry_id, entry_record(self._index.status(e), self.config.node))

    def _publish_queue(self, entry_id: str, record: dict | None) -> None:
        if self._publish is not None:
            self._publish.put(entry_id, record)

    async def _in_pool(self, fn, *args):  # type: ignore[no-untyped-def]
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
