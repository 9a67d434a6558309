"""Reading a cached dataset vs reading the same bytes from local disk directly (target >= 90 %).

    .venv/bin/python bench/cache/bench_read.py [--files 64] [--file-mib 2] [--object-mib 128] [--rounds 5]

Fills a node cache from a local S3 endpoint, copies the same files to a plain
folder, then alternates reads (warm page cache for both): the path from
`resolve()` read with plain file I/O, and the `stream()` read-through iterator
on a cached object, each against direct reads of the copy.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from minio import Minio

from gpufair.cache.node import NodeCache, NodeCacheConfig
from gpufair.local import S3Server

MiB = 1024 * 1024


def read_chunks(path: Path, chunk: int = MiB) -> int:
    """Direct baseline for the iterator: the file as `chunk`-sized bytes objects."""
    total = 0
    with open(path, "rb", buffering=0) as f:
        while buf := f.read(chunk):
            total += len(buf)
    return total


def read_tree(root: Path) -> int:
    buf = bytearray(MiB)
    total = 0
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    for p in files:
        with open(p, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                total += n
    return total


def _plain_copy(src: str | Path, dst: str | Path) -> None:
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        while buf := fi.read(MiB):
            fo.write(buf)


async def via_resolve(cache: NodeCache, uri: str) -> int:
    st = await cache.resolve(uri)
    return read_tree(Path(st.path))


async def via_stream(cache: NodeCache, uri: str) -> int:
    total = 0
    async for b in cache.stream(uri, chunk_size=MiB):
        total += len(b)
    return total


async def run(args: argparse.Namespace, client: Minio, work: Path) -> None:
    cache = NodeCache(NodeCacheConfig(cache_dir=work / "cache", capacity_bytes=8 << 30, node="bench"), s3=client)
    await cache.start()
    try:
        prefix = (await cache.resolve("s3://bench/ds/", wait=True, timeout=600)).path
        obj = (await cache.resolve("s3://bench/blob.bin", wait=True, timeout=600)).path
        # Plain read/write copies (copy_file_range could share extents and skew the baseline).
        shutil.copytree(prefix, work / "plain-ds", copy_function=_plain_copy)
        _plain_copy(obj, work / "plain-blob.bin")
        plain_ds, plain_blob = work / "plain-ds", work / "plain-blob.bin"
        cases = [
            ("prefix, resolve() + read", lambda: via_resolve(cache, "s3://bench/ds/"), lambda: read_tree(plain_ds)),
            ("object, resolve() + read", lambda: via_resolve(cache, "s3://bench/blob.bin"),
             lambda: read_tree(plain_blob)),
            ("object, stream() iterator", lambda: via_stream(cache, "s3://bench/blob.bin"),
             lambda: read_chunks(plain_blob)),
        ]
        print(f"{'case':<28} {'direct MB/s':>12} {'cache MB/s':>11} {'ratio (median)':>15} {'ratio (best)':>13}")
        for label, cached, plain in cases:  # noqa: B023 - lambdas run inside the loop
            direct_t, cache_t = [], []
            for r in range(args.rounds):
                for which in ((0, 1) if r % 2 else (1, 0)):  # alternate who goes first
                    t0 = time.perf_counter()
                    if which:
                        n_direct = plain()
                        direct_t.append(time.perf_counter() - t0)
                    else:
                        n_cache = await cached()
                        cache_t.append(time.perf_counter() - t0)
                assert n_cache == n_direct, (n_cache, n_direct)
            d, c = statistics.median(direct_t), statistics.median(cache_t)
            best = min(direct_t) / min(cache_t)
            print(f"{label:<28} {n_direct / d / 1e6:>12.0f} {n_direct / c / 1e6:>11.0f} {d / c:>15.0%} {best:>13.0%}")
    finally:
        await cache.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=64)
    ap.add_argument("--file-mib", type=int, default=2)
    ap.add_argument("--object-mib", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpufair-bench-read-"))
    server = S3Server().start()
    try:
        client = Minio(server.endpoint, access_key=server.access_key, secret_key=server.secret_key, secure=False)
        client.make_bucket("bench")
        for i in range(args.files):
            b = os.urandom(args.file_mib * MiB)
            client.put_object("bench", f"ds/part-{i:04d}.bin", io.BytesIO(b), len(b))
        b = os.urandom(args.object_mib * MiB)
        client.put_object("bench", "blob.bin", io.BytesIO(b), len(b))
        asyncio.run(run(args, client, work))
    finally:
        server.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
