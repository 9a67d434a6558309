"""Node cache against a real S3 endpoint (moto server) and real etcd."""

from __future__ import annotations

import asyncio
import json
import threading
from types import SimpleNamespace
from pathlib import Path

import aetcd
import pytest

from gpufair.cache.node import (EntryState, EtcdPublisher, IntegrityError, MemoryPublisher, NodeCache,
                                ObjectChanged, make_client)
from gpufair.common.errors import FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted, Unavailable
from gpufair.common.keys import Keys
from gpufair.local.procs import free_port

try:
    from .node_support import KiB, MiB, WrappedS3, config, disk_bytes, new_bucket, payload, put, until, \
        visible_entries, hidden_entries
except ImportError:
    from node_support import KiB, MiB, WrappedS3, config, disk_bytes, new_bucket, payload, put, until, \
        visible_entries, hidden_entries


async def _etcd_get(endpoint: str, key: str) -> dict | None:
    host, port = endpoint.split(":")
    async with aetcd.Client(host, int(port)) as c:
        got = await c.get(key.encode())
        return json.loads(got.value) if got else None


async def test_prefetch_then_resolve_serves_identical_bytes_and_mirrors_to_etcd(
        tmp_path, s3_client, s3_server, etcd_endpoint, etcd_root):
    bucket = new_bucket(s3_client)
    data = payload(300 * KiB)  # five 64 KiB parts, one short
    put(s3_client, bucket, "train/shard-0.bin", data)
    pub = EtcdPublisher(etcd_endpoint, "node-a", Keys(root=etcd_root))
    cache = NodeCache(config(tmp_path), s3=s3_client, publisher=pub)
    await cache.start()
    try:
        uri = f"s3://{bucket}/train/shard-0.bin"
        st = await cache.prefetch(uri)
        assert st.state in (EntryState.FETCHING, EntryState.CACHED)
        st = await cache.resolve(f"minio://{bucket}/train/shard-0.bin", wait=True, timeout=30)
        assert st.state is EntryState.CACHED and st.verified == "md5"
        assert Path(st.path).read_bytes() == data and st.size_bytes == len(data)
        assert cache.fetches_started == 1 and cache.fetcher.get_requests == 5
        await cache.flush_published()
        rec = await _etcd_get(etcd_endpoint, Keys(root=etcd_root).cache_entry("node-a", st.entry_id))
        assert rec and rec["state"] == "cached" and rec["path"] == st.path and rec["size"] == len(data)
    finally:
        await cache.close()


async def test_prefix_dataset_lands_as_one_folder_of_every_object(tmp_path, s3_client):
    bucket = new_bucket(s3_client)
    files = {"a.bin": payload(100 * KiB), "sub/b.bin": payload(3 * KiB), "sub/deep/c.bin": b"", "d": payload(70 * KiB)}
    for rel, data in files.items():
        put(s3_client, bucket, f"ds/v1/{rel}", data)
    put(s3_client, bucket, "ds/v1/folder/", b"")  # a folder marker carries no data
    put(s3_client, bucket, "ds/v10/other.bin", payload(10))  # same string prefix, other dataset
    cache = NodeCache(config(tmp_path), s3=s3_client)
    await cache.start()
    try:
        st = await cache.resolve(f"s3://{bucket}/ds/v1/", wait=True, timeout=30)
        root = Path(st.path)
        got = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
        assert got == files
        assert st.size_bytes == sum(len(v) for v in files.values())
    finally:
        await cache.close()


@pytest.mark.parametrize("cache_part", [5 * MiB, 1 * MiB])
async def test_multipart_upload_is_verified_against_its_multipart_etag(tmp_path, s3_client, cache_part):
    bucket = new_bucket(s3_client)
    data = payload(11 * MiB)
    put(s3_client, bucket, "big.bin", data, part_size=5 * MiB)
    assert s3_client.stat_object(bucket, "big.bin").etag.endswith("-3")
    cache = NodeCache(config(tmp_path, part_size=cache_part, chunk_size=256 * KiB), s3=s3_client)
    await cache.start()
    try:
        st = await cache.resolve(f"s3://{bucket}/big.bin", wait=True, timeout=60)
        assert st.verified == "multipart-md5"
        assert Path(st.path).read_bytes() == data
    finally:
        await cache.close()


async def test_ten_concurrent_resolves_cause_one_download_and_show_progress(tmp_path, s3_client):
    bucket = new_bucket(s3_client)
    data = payload(256 * KiB)
    put(s3_client, bucket, "shared.bin", data)
    s3 = WrappedS3(s3_client)
    release = threading.Event()
    s3.before_get = lambda n, key, off: release.wait(30) if n > 1 else None  # first part lands, rest wait
    cache = NodeCache(config(tmp_path, max_concurrency=2), s3=s3)
    await cache.start()
    try:
        uri = f"s3://{bucket}/shared.bin"
        waiters = [asyncio.create_task(cache.resolve(uri, wait=True, timeout=30)) for _ in range(10)]
        await until(lambda: (cache.status(uri).progress or _P0).done_bytes > 0, what="first part")
        mid = cache.status(uri)
        assert mid.state is EntryState.FETCHING and mid.path is None
        assert mid.progress.total_bytes == len(data) and 0 < mid.progress.done_bytes < len(data)
        release.set()
        results = await asyncio.gather(*waiters)
        assert {r.path for r in results} == {results[0].path}
        assert Path(results[0].path).read_bytes() == data
        assert cache.fetches_started == 1 and s3.gets == 4  # 256 KiB / 64 KiB parts, once
    finally:
        release.set()
        await cache.close()


class _P0:
    done_bytes = 0


async def test_lru_eviction_spares_pinned_and_refuses_what_cannot_fit(tmp_path, s3_client):
    bucket = new_bucket(s3_client)
    size = 300 * KiB
    for name in "abcd":
        put(s3_client, bucket, name, payload(size))
    put(s3_client, bucket, "huge", payload(1100 * KiB))
    cache = NodeCache(config(tmp_path, capacity=1000 * KiB), s3=s3_client)
    await cache.start()
    try:
        uri = {n: f"s3://{bucket}/{n}" for n in ("a", "b", "c", "d", "huge")}
        await cache.prefetch(uri["a"], pin_owner="run1/train")
        for n in "abc":
            await cache.resolve(uri[n], wait=True, timeout=30)
        await cache.resolve(uri["a"], wait=True)  # a is most recently used, but b is the oldest unpinned
        await cache.resolve(uri["c"], wait=True)
        await cache.resolve(uri["d"], wait=True, timeout=30)
        states = {n: cache.status(u).state for n, u in uri.items()}
        assert states == {"a": EntryState.CACHED, "b": EntryState.ABSENT, "c": EntryState.CACHED,
                          "d": EntryState.CACHED, "huge": EntryState.ABSENT}
        assert disk_bytes(tmp_path) <= 1000 * KiB
        with pytest.raises(ResourceExhausted, match=r"needs 1126400 bytes but at most \d+"):
            await cache.prefetch(uri["huge"])
        assert [cache.status(uri[n]).state for n in "acd"] == [EntryState.CACHED] * 3  # no thrashing
        assert cache.unpin("run1/train") == 1
        await cache.evict(uri["a"])
        assert cache.status(uri["a"]).state is EntryState.ABSENT and len(visible_entries(tmp_path)) == 2
    finally:
        await cache.close()


async def test_cancelled_fetch_leaves_nothing_visible(tmp_path, s3_client):
    bucket = new_bucket(s3_client)
    put(s3_client, bucket, "obj", payload(512 * KiB))
    s3 = WrappedS3(s3_client)
    release = threading.Event()
    s3.before_get = lambda n, key, off: release.wait(30) if n > 2 else None
    cache = NodeCache(config(tmp_path, max_concurrency=2), s3=s3)
    await cache.start()
    try:
        uri = f"s3://{bucket}/obj"
        await cache.prefetch(uri)
        await until(lambda: (cache.status(uri).progress or _P0).done_bytes > 0, what="a part on disk")
        assert visible_entries(tmp_path) == [] and hidden_entries(tmp_path)  # staged, not visible
        evicting = asyncio.create_task(cache.evict(uri, force=True))
        release.set()
        await evicting
        assert cache.status(uri).state is EntryState.ABSENT
        assert visible_entries(tmp_path) == [] and hidden_entries(tmp_path) == []
    finally:
        release.set()
        await cache.close()


async def test_corrupted_bytes_are_detected_and_never_served(tmp_path, s3_client):
    bucket = new_bucket(s3_client)
    data = payload(200 * KiB)
    put(s3_client, bucket, "obj", data)
    s3 = WrappedS3(s3_client)
    s3.mutate = lambda buf: bytes([buf[0] ^ 0xFF]) + buf[1:]
    cache = NodeCache(config(tmp_path, retries=1), s3=s3)
    await cache.start()
    uri = f"s3://{bucket}/obj"
    try:
        with pytest.raises(IntegrityError, match="does not match ETag"):
            await cache.resolve(uri, wait=True, timeout=30)
        st = cache.status(uri)
        assert st.state is EntryState.FAILED and "ETag" in st.reason and st.path is None
        assert s3.gets == 2 * 4  # one retry, then it gave up
        assert visible_entries(tmp_path) == [] and hidden_entries(tmp_path) == []
        s3.mutate = None
        st = await cache.resolve(uri, wait=True, timeout=30)
        assert Path(st.path).read_bytes() == data
    finally:
        await cache.close()


@pytest.mark.parametrize("retries", [0, 1])
async def test_object_replaced_mid_fetch_is_never_mixed(tmp_path, s3_client, retries):
    bucket = new_bucket(s3_client)
    old, new = payload(256 * KiB), payload(256 * KiB)
    put(s3_client, bucket, "obj", old)
    s3 = WrappedS3(s3_client)
    s3.before_get = lambda n, key, off: put(s3_client, bucket, "obj", new) if n == 2 else None
    cache = NodeCache(config(tmp_path, max_concurrency=1, retries=retries), s3=s3)
    await cache.start()
    uri = f"s3://{bucket}/obj"
    try:
        if retries == 0:
            with pytest.raises(ObjectChanged, match="changed on S3"):
                await cache.resolve(uri, wait=True, timeout=30)
            assert cache.status(uri).state is EntryState.FAILED and visible_entries(tmp_path) == []
        else:
            st = await cache.resolve(uri, wait=True, timeout=30)
            assert Path(st.path).read_bytes() == new
    finally:
        await cache.close()


async def test_s3_endpoint_down_is_unavailable_with_the_endpoint_named(tmp_path):
    cfg = config(tmp_path, s3_endpoint=f"127.0.0.1:{free_port()}")
    cache = NodeCache(cfg, s3=make_client(cfg))
    await cache.start()
    try:
        with pytest.raises(Unavailable, match=f"S3 endpoint {cfg.s3_endpoint} unreachable"):
            await cache.prefetch("s3://some-bucket/x")
        assert visible_entries(tmp_path) == []
    finally:
        await cache.close()


async def test_missing_object_is_not_found(tmp_path, s3_client):
    bucket = new_bucket(s3_client)
    cache = NodeCache(config(tmp_path), s3=s3_client)
    await cache.start()
    try:
        with pytest.raises(NotFound, match="does not exist"):
            await cache.prefetch(f"s3://{bucket}/nope")
        with pytest.raises(NotFound, match="matches no objects"):
            await cache.prefetch(f"s3://{bucket}/empty/")
    finally:
        await cache.close()


async def test_read_through_streams_a_miss_and_caches_it_once(tmp_path, s3_client):
    bucket = new_bucket(s3_client)
    data = payload(320 * KiB)
    put(s3_client, bucket, "obj", data)
    s3 = WrappedS3(s3_client)
    cache = NodeCache(config(tmp_path, max_concurrency=2), s3=s3, publisher=MemoryPublisher())
    await cache.start()
    uri = f"s3://{bucket}/obj"
    try:
        got = b"".join([b async for b in cache.stream(uri, chunk_size=50 * KiB)])
        assert got == data and cache.status(uri).state is EntryState.CACHED
        again = b"".join([b async for b in cache.stream(uri)])
        assert again == data and s3.gets == 5 and cache.fetches_started == 1
    finally:
        await cache.close()


async def test_read_through_serves_bytes_before_the_fetch_completes(tmp_path, s3_client):
    bucket = new_bucket(s3_client)
    data = payload(256 * KiB)
    put(s3_client, bucket, "obj", data)
    s3 = WrappedS3(s3_client)
    release = threading.Event()
    s3.before_get = lambda n, key, off: release.wait(30) if off > 0 else None  # only part 0 flows
    cache = NodeCache(config(tmp_path, max_concurrency=2), s3=s3)
    await cache.start()
    uri = f"s3://{bucket}/obj"
    try:
        it = cache.stream(uri, chunk_size=32 * KiB)
        first = await it.__anext__()
        assert first == data[:32 * KiB] and cache.status(uri).state is EntryState.FETCHING
        release.set()
        rest = b"".join([b async for b in it])
        assert first + rest == data and cache.status(uri).state is EntryState.CACHED
    finally:
        release.set()
        await cache.close()


async def test_stream_fails_when_the_object_changes_under_it(tmp_path, s3_client):
    bucket = new_bucket(s3_client)
    old, new = payload(256 * KiB), payload(256 * KiB)
    put(s3_client, bucket, "obj", old)
    s3 = WrappedS3(s3_client)
    replaced = threading.Event()
    first_read = threading.Event()

    def hook(n: int, key: str, off: int) -> None:
        if n == 2:  # part 0 has landed; wait until the reader took it, then replace the object
            first_read.wait(30)
            put(s3_client, bucket, "obj", new)
            replaced.set()

    s3.before_get = hook
    cache = NodeCache(config(tmp_path, max_concurrency=1, retries=1), s3=s3)
    await cache.start()
    uri = f"s3://{bucket}/obj"
    try:
        it = cache.stream(uri, chunk_size=64 * KiB)
        assert await it.__anext__() == old[:64 * KiB]
        first_read.set()
        with pytest.raises(ObjectChanged, match="discard"):
            async for _ in it:
                pass
        st = await cache.resolve(uri, wait=True, timeout=30)  # the retry cached the new version whole
        assert Path(st.path).read_bytes() == new
    finally:
        first_read.set()
        await cache.close()


async def test_etcd_down_does_not_stop_caching_and_records_catch_up(tmp_path, s3_client):
    bucket = new_bucket(s3_client)
    put(s3_client, bucket, "obj", payload(10 * KiB))
    pub = MemoryPublisher()
    pub.fail = True
    cache = NodeCache(config(tmp_path), s3=s3_client, publisher=pub)
    await cache.start()
    try:
        st = await cache.resolve(f"s3://{bucket}/obj", wait=True, timeout=30)
        assert st.state is EntryState.CACHED and pub.records == {}
        pub.fail = False
        await cache.flush_published()
        assert pub.records[st.entry_id]["state"] == "cached"
    finally:
        await cache.close()


async def test_evicting_pinned_or_unknown_datasets_needs_force(tmp_path, s3_client):
    bucket = new_bucket(s3_client)
    put(s3_client, bucket, "obj", payload(10 * KiB))
    cache = NodeCache(config(tmp_path), s3=s3_client)
    await cache.start()
    uri = f"s3://{bucket}/obj"
    try:
        await cache.prefetch(uri, pin_owner="run1/eval")
        await cache.resolve(uri, wait=True, timeout=30)
        with pytest.raises(FailedPrecondition, match="pinned by run1/eval"):
            await cache.evict(uri)
        await cache.evict(uri, force=True)
        assert visible_entries(tmp_path) == []
        with pytest.raises(NotFound, match="not in the cache"):
            await cache.evict(uri)
    finally:
        await cache.close()


async def test_prefix_with_keys_that_would_escape_is_refused(tmp_path, s3_client):
    bucket = new_bucket(s3_client)
    put(s3_client, bucket, "ds/ok.bin", b"fine")

    class Hostile(WrappedS3):  # the SDK will not upload such a key, but another store could list one
        def list_objects(self, bucket, prefix=None, recursive=False):
            yield from self.inner.list_objects(bucket, prefix=prefix, recursive=recursive)
            yield SimpleNamespace(object_name="ds/a/../../evil", size=4, etag="0" * 32, is_dir=False)

    cache = NodeCache(config(tmp_path), s3=Hostile(s3_client))
    await cache.start()
    try:
        with pytest.raises(InvalidArgument, match="escape the cache directory"):
            await cache.prefetch(f"s3://{bucket}/ds/")
        assert not (tmp_path.parent / "evil").exists() and visible_entries(tmp_path) == []
    finally:
        await cache.close()
