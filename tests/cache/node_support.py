"""Shared helpers for the node cache tests: buckets, payloads, and a wrappable S3 client."""

from __future__ import annotations

import io
import os
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpufair.cache.node import NodeCacheConfig

KiB = 1024
MiB = 1024 * KiB


def new_bucket(s3_client: Any) -> str:
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3_client.make_bucket(name)
    return name


def put(s3_client: Any, bucket: str, key: str, data: bytes, part_size: int | None = None) -> None:
    if part_size:
        s3_client.put_object(bucket, key, io.BytesIO(data), -1, part_size=part_size)
    else:
        s3_client.put_object(bucket, key, io.BytesIO(data), len(data))


def payload(n: int) -> bytes:
    return os.urandom(n)


def config(tmp: Path, capacity: int = 64 * MiB, **kw: Any) -> NodeCacheConfig:
    base = dict(part_size=64 * KiB, max_concurrency=4, chunk_size=16 * KiB, node="node-a")
    base.update(kw)
    return NodeCacheConfig(cache_dir=tmp, capacity_bytes=capacity, **base)


class _Body:
    """A response wrapper that can corrupt the bytes it passes on."""

    def __init__(self, resp: Any, mutate: Callable[[bytes], bytes] | None) -> None:
        self._resp = resp
        self._mutate = mutate
        self.headers = resp.headers

    def read(self, amt: int | None = None) -> bytes:
        buf = self._resp.read(amt)
        return self._mutate(buf) if (self._mutate and buf) else buf

    def close(self) -> None:
        self._resp.close()

    def release_conn(self) -> None:
        self._resp.release_conn()


class WrappedS3:
    """Delegates to a real Minio client, counting GETs and running hooks around them."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.gets = 0
        self.get_bytes_requested = 0
        self.lock = threading.Lock()
        self.before_get: Callable[[int, str, int], None] | None = None  # (call no, key, offset)
        self.mutate: Callable[[bytes], bytes] | None = None
        self.gate: threading.Event | None = None  # when set, GETs block until it is set

    def stat_object(self, bucket: str, key: str) -> Any:
        return self.inner.stat_object(bucket, key)

    def list_objects(self, bucket: str, prefix: str | None = None, recursive: bool = False) -> Any:
        return self.inner.list_objects(bucket, prefix=prefix, recursive=recursive)

    def get_object(self, bucket: str, key: str, offset: int = 0, length: int = 0,
                   request_headers: dict[str, str] | None = None) -> Any:
        with self.lock:
            self.gets += 1
            n = self.gets
        if self.gate is not None:
            self.gate.wait(timeout=30)
        if self.before_get:
            self.before_get(n, key, offset)
        resp = self.inner.get_object(bucket, key, offset=offset, length=length, request_headers=request_headers)
        return _Body(resp, self.mutate)


async def until(pred: Callable[[], bool], timeout: float = 15.0, what: str = "condition") -> None:
    """Poll `pred` until true; fail the test with `what` after `timeout` seconds."""
    import asyncio
    import time

    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def visible_entries(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if not p.name.startswith("."))


def hidden_entries(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("."))


def disk_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and p.name != ".gpufair-meta.json")
