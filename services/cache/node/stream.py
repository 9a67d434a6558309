"""Read-through: serve an object's bytes while its fetch is still landing them."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import AsyncIterator

from gpufair.common.errors import Unavailable

from .errors import ObjectChanged
from .index import Entry
from .status import EntryState

READ_BATCH = 4 * 1024 * 1024


async def read_file(path: str, chunk: int, pool: concurrent.futures.Executor,
                    start: int = 0) -> AsyncIterator[bytes]:
    """Chunks of a local file from `start`, read in the pool a batch at a time.

    One pool hop per `READ_BATCH` bytes rather than per chunk: at page-cache speed
    the hop, not the copy, would otherwise dominate.
    """
    loop = asyncio.get_running_loop()
    fd = await loop.run_in_executor(pool, os.open, path, os.O_RDONLY)
    # One reused buffer filled in the pool; chunks are copied out on this thread, so
    # they are allocated and freed by one thread (cross-thread 1 MiB allocations cost
    # an mmap/munmap each and ran ~10x slower).
    buf = bytearray(max(chunk, READ_BATCH // chunk * chunk))
    view = memoryview(buf)
    try:
        pos = start
        while True:
            n = await loop.run_in_executor(pool, os.preadv, fd, [buf], pos)
            for i in range(0, n, chunk):
                yield bytes(view[i:min(i + chunk, n)])
            pos += n
            if n < len(buf):
                return
    finally:
        view.release()
        os.close(fd)


async def follow_fetch(e: Entry, key: str, chunk: int, pool: concurrent.futures.Executor) -> AsyncIterator[bytes]:
    """Yield the object's bytes in order as contiguous parts land; end once it is cached and verified."""
    t = e.tracker
    assert t is not None
    loop = asyncio.get_running_loop()
    fd: int | None = None
    attempt = -1
    pos = 0
    try:
        while True:
            if e.state is EntryState.FAILED and e.error is not None:
                raise e.error
            if e.state is EntryState.ABSENT:
                raise Unavailable(f"fetch of {e.uri} was cancelled")
            if fd is not None and t.attempt != attempt:
                if pos:
                    raise ObjectChanged(f"{e.uri} changed while it was being streamed; discard the bytes read")
                os.close(fd)
                fd = None
            if fd is None:
                if e.state is EntryState.CACHED:  # finished before we started following it
                    async for buf in read_file(e.path or "", chunk, pool, pos):
                        yield buf
                    return
                fd, attempt = _open(t.staging_files.get(key)), t.attempt
            if fd is not None:
                mark = t.watermark.get(key, 0) if e.state is EntryState.FETCHING else os.fstat(fd).st_size
                if pos < mark:
                    buf = await loop.run_in_executor(pool, os.pread, fd, min(chunk, mark - pos), pos)
                    pos += len(buf)
                    yield buf
                    continue
                if e.state is EntryState.CACHED:
                    return
            await t.wait_change()
    finally:
        if fd is not None:
            os.close(fd)


def _open(path: str | None) -> int | None:
    if path is None:
        return None
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:  # removed by a failing attempt; the state says why
        return None
