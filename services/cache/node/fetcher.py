"""Pull a dataset's objects into a staging directory: parallel ranged parts, bounded memory.

Each worker streams one part at a time, `chunk_size` bytes at a time, to the file
at the part's offset (os.pwrite), so memory stays near workers x chunk_size
whatever the object sizes. Files are fsynced and verified here; making them
visible (the rename) is the caller's job.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from gpufair.common.paths import safe_join

from .s3 import S3Source
from .status import Manifest, ObjectSpec
from .verify import verify_object

logger = logging.getLogger(__name__)


@dataclass
class FetchTracker:
    """Live progress of one fetch; `wait_change()` wakes on every part that lands."""

    total_bytes: int = 0
    objects_total: int = 0
    done_bytes: int = 0
    objects_done: int = 0
    # Contiguous bytes on disk from the start of each object (for read-through).
    watermark: dict[str, int] = field(default_factory=dict)
    staging_files: dict[str, str] = field(default_factory=dict)
    planned: bool = False  # manifest known and bytes reserved
    attempt: int = 0  # bumped on every retry: bytes of an older attempt are void
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def reset(self, total_bytes: int, objects_total: int) -> None:
        """Start a (new) attempt with fresh totals."""
        self.total_bytes, self.objects_total = total_bytes, objects_total
        self.done_bytes = self.objects_done = 0
        self.watermark.clear()
        self.staging_files.clear()
        self.attempt += 1
        self.notify()

    def notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_change(self) -> None:
        await self._changed.wait()


@dataclass
class _ObjectState:
    obj: ObjectSpec
    path: str
    parts: list[tuple[int, int]]
    digests: dict[int, bytes] = field(default_factory=dict)
    next_contiguous: int = 0
    level: str = ""


class Fetcher:
    """Downloads manifests with at most `max_concurrency` part GETs in flight."""

    def __init__(self, source: S3Source, pool: concurrent.futures.ThreadPoolExecutor, part_size: int,
                 max_concurrency: int, chunk_size: int, verify_etag: bool = True) -> None:
        self.source = source
        self.pool = pool
        self.part_size = part_size
        self.max_concurrency = max_concurrency
        self.chunk_size = chunk_size
        self.verify_etag = verify_etag
        self.get_requests = 0  # part GETs issued, for tests and benchmarks

    def plan_parts(self, size: int) -> list[tuple[int, int]]:
        """(offset, length) of each ranged GET; small objects are one whole-object GET."""
        if size == 0:
            return []
        return [(off, min(self.part_size, size - off)) for off in range(0, size, self.part_size)]

    async def fetch(self, manifest: Manifest, data_dir: Path, tracker: FetchTracker) -> dict[str, str]:
        """Fetch every object into `data_dir`; returns rel -> verification level."""
        states = [self._prepare(o, data_dir, tracker) for o in manifest.objects]
        queue: asyncio.Queue[tuple[_ObjectState, int]] = asyncio.Queue()
        for st in states:
            for i in range(len(st.parts)):
                queue.put_nowait((st, i))
        cancel = threading.Event()
        running: set[concurrent.futures.Future[bytes]] = set()
        workers = [asyncio.create_task(self._worker(manifest.bucket, queue, tracker, cancel, running))
                   for _ in range(min(self.max_concurrency, max(1, queue.qsize())))]
        try:
            await asyncio.gather(*workers)
        except BaseException:
            cancel.set()
            for w in workers:
                w.cancel()
            # Let threads that are mid-part stop before the caller deletes their files.
            if running:
                await asyncio.wait([asyncio.wrap_future(f) for f in list(running)])
            raise
        return await self._finish(manifest, states, tracker)

    def _prepare(self, obj: ObjectSpec, data_dir: Path, tracker: FetchTracker) -> _ObjectState:
        path = safe_join(data_dir, obj.rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, obj.size)  # sparse; parts fill it at their offsets
        finally:
            os.close(fd)
        tracker.watermark[obj.key] = 0
        tracker.staging_files[obj.key] = str(path)
        return _ObjectState(obj, str(path), self.plan_parts(obj.size))

    async def _worker(self, bucket: str, queue: asyncio.Queue[tuple[_ObjectState, int]],
                      tracker: FetchTracker, cancel: threading.Event,
                      running: set[concurrent.futures.Future[bytes]]) -> None:
        while not queue.empty():
            st, i = queue.get_nowait()
            off, length = st.parts[i]
            self.get_requests += 1
            fut = self.pool.submit(self.source.read_part, bucket, st.obj, off, length, st.path,
                                   self.chunk_size, cancel)
            running.add(fut)
            try:
                st.digests[i] = await asyncio.wrap_future(fut)
            finally:
                running.discard(fut)
            tracker.done_bytes += length
            _advance_watermark(st, tracker)
            if len(st.digests) == len(st.parts):
                await self._finalize(bucket, st, tracker)
            tracker.notify()

    async def _finalize(self, bucket: str, st: _ObjectState, tracker: FetchTracker) -> None:
        """fsync and verify one complete object (in the pool: it hashes the file)."""
        loop = asyncio.get_running_loop()
        digests = [st.digests[i] for i in range(len(st.parts))]
        st.level = await loop.run_in_executor(self.pool, _fsync_and_verify, st.path, st.obj,
                                              f"s3://{bucket}/{st.obj.key}", self.part_size, digests,
                                              self.verify_etag)
        tracker.objects_done += 1

    async def _finish(self, manifest: Manifest, states: list[_ObjectState],
                      tracker: FetchTracker) -> dict[str, str]:
        for st in states:
            if not st.parts:  # empty objects need no GET
                await self._finalize(manifest.bucket, st, tracker)
        tracker.notify()
        return {st.obj.rel: st.level for st in states}


def _advance_watermark(st: _ObjectState, tracker: FetchTracker) -> None:
    while st.next_contiguous < len(st.parts) and st.next_contiguous in st.digests:
        st.next_contiguous += 1
    if st.next_contiguous:
        off, length = st.parts[st.next_contiguous - 1]
        tracker.watermark[st.obj.key] = off + length


def _fsync_and_verify(path: str, obj: ObjectSpec, what: str, part_size: int,
                      digests: list[bytes], check_etag: bool) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return verify_object(path, obj, what, part_size, digests, check_etag)
