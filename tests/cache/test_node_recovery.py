"""Crash safety: a SIGKILLed fetch leaves nothing visible; restart rebuilds from disk and etcd."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import aetcd

from gpufair.cache.node import EntryState, EtcdPublisher, MemoryPublisher, NodeCache
from gpufair.common.keys import Keys

try:
    from .node_support import KiB, config, hidden_entries, new_bucket, payload, put, visible_entries
except ImportError:
    from node_support import KiB, config, hidden_entries, new_bucket, payload, put, visible_entries

# Runs a fetch in a child process whose GETs after the first two block forever,
# prints READY once bytes are on disk, and waits to be killed.
_CHILD = textwrap.dedent("""
    import asyncio, sys, threading
    from pathlib import Path
    from minio import Minio
    from gpufair.cache.node import EtcdPublisher, NodeCache, NodeCacheConfig
    from gpufair.common.keys import Keys

    endpoint, ak, sk, etcd, root, cache_dir, uri = sys.argv[1:8]
    inner = Minio(endpoint, access_key=ak, secret_key=sk, secure=False)
    never = threading.Event()
    class Blocking:
        n = 0
        def stat_object(self, *a, **k): return inner.stat_object(*a, **k)
        def list_objects(self, *a, **k): return inner.list_objects(*a, **k)
        def get_object(self, *a, **k):
            Blocking.n += 1
            if Blocking.n > 2:
                never.wait()
            return inner.get_object(*a, **k)

    async def main():
        cfg = NodeCacheConfig(cache_dir=Path(cache_dir), capacity_bytes=1 << 30, node="node-a",
                              part_size=65536, max_concurrency=2, chunk_size=16384)
        cache = NodeCache(cfg, s3=Blocking(), publisher=EtcdPublisher(etcd, "node-a", Keys(root=root)))
        await cache.start()
        await cache.prefetch(uri)
        while (cache.status(uri).progress.done_bytes if cache.status(uri).progress else 0) == 0:
            await asyncio.sleep(0.01)
        await cache.flush_published()
        print("READY", flush=True)
        await asyncio.Event().wait()
    asyncio.run(main())
""")


async def _etcd_records(endpoint: str, root: str) -> dict[str, dict]:
    host, port = endpoint.split(":")
    prefix = Keys(root=root).cache_node_prefix("node-a") + "entries/"
    async with aetcd.Client(host, int(port)) as c:
        res = await c.get_prefix(prefix.encode())
        return {kv.key.decode()[len(prefix):]: json.loads(kv.value) for kv in res}


async def test_sigkilled_fetch_leaves_no_visible_file_and_restart_cleans_up(
        tmp_path, s3_client, s3_server, etcd_endpoint, etcd_root):
    bucket = new_bucket(s3_client)
    kept, big = payload(100 * KiB), payload(1024 * KiB)
    put(s3_client, bucket, "kept", kept)
    put(s3_client, bucket, "big", big)
    keys = Keys(root=etcd_root)
    # A first life caches one dataset and shuts down cleanly.
    cache = NodeCache(config(tmp_path), s3=s3_client, publisher=EtcdPublisher(etcd_endpoint, "node-a", keys))
    await cache.start()
    kept_status = await cache.resolve(f"s3://{bucket}/kept", wait=True, timeout=30)
    cache.pin(f"s3://{bucket}/kept", "run7/step-train")
    await cache.close()

    # A second life is SIGKILLed mid-fetch.
    argv = [sys.executable, "-c", _CHILD, s3_server.endpoint, s3_server.access_key, s3_server.secret_key,
            etcd_endpoint, etcd_root, str(tmp_path), f"s3://{bucket}/big"]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ))
    try:
        line = child.stdout.readline()
        assert line.strip() == b"READY", child.stderr.read().decode()[-2000:]
    finally:
        child.kill()
        child.wait(timeout=10)
    assert visible_entries(tmp_path) == [kept_status.entry_id]  # nothing half-visible
    assert any(n.startswith(".partial-") for n in hidden_entries(tmp_path))
    records = await _etcd_records(etcd_endpoint, etcd_root)
    assert {r["state"] for r in records.values()} == {"cached", "fetching"}

    # The third life recovers: temp files gone, index rebuilt, etcd reconciled, pin restored.
    cache = NodeCache(config(tmp_path), s3=s3_client, publisher=EtcdPublisher(etcd_endpoint, "node-a", keys))
    report = await cache.start()
    try:
        assert report.entries == 1 and report.stale_records == 1
        assert any(n.startswith(".partial-") for n in report.removed)
        assert hidden_entries(tmp_path) == []
        [st] = cache.list()
        assert st.state is EntryState.CACHED and Path(st.path).read_bytes() == kept
        assert st.pin_owners == ("run7/step-train",)
        await cache.flush_published()
        assert set(await _etcd_records(etcd_endpoint, etcd_root)) == {kept_status.entry_id}
    finally:
        await cache.close()


async def test_restart_drops_damaged_entries_and_keeps_intact_ones(tmp_path, s3_client):
    bucket = new_bucket(s3_client)
    a, b = payload(64 * KiB), payload(80 * KiB)
    put(s3_client, bucket, "a", a)
    put(s3_client, bucket, "b", b)
    pub = MemoryPublisher()
    cache = NodeCache(config(tmp_path), s3=s3_client, publisher=pub)
    await cache.start()
    sa = await cache.resolve(f"s3://{bucket}/a", wait=True, timeout=30)
    sb = await cache.resolve(f"s3://{bucket}/b", wait=True, timeout=30)
    await cache.close()
    with open(sb.path, "r+b") as f:  # a torn file: the size no longer matches the metadata
        f.truncate(10)
    (tmp_path / "0123456789abcdef0123456789abcdef").mkdir()  # an entry folder with no metadata
    (tmp_path / ".partial-leftover").mkdir()

    cache = NodeCache(config(tmp_path), s3=s3_client, publisher=pub)
    report = await cache.start()
    try:
        assert report.entries == 1 and len(report.removed) == 3
        assert [s.uri for s in cache.list()] == [sa.uri]
        assert visible_entries(tmp_path) == [sa.entry_id]
        await cache.flush_published()
        assert set(pub.records) == {sa.entry_id}
        assert Path((await cache.resolve(sb.uri, wait=True, timeout=30)).path).read_bytes() == b
    finally:
        await cache.close()


async def test_restart_with_smaller_capacity_evicts_least_recently_used(tmp_path, s3_client):
    bucket = new_bucket(s3_client)
    for n in "xyz":
        put(s3_client, bucket, n, payload(100 * KiB))
    cache = NodeCache(config(tmp_path), s3=s3_client)
    await cache.start()
    for n in "yxz":
        await cache.resolve(f"s3://{bucket}/{n}", wait=True, timeout=30)
    await cache.close()
    cache = NodeCache(config(tmp_path, capacity=250 * KiB), s3=s3_client)
    await cache.start()
    try:
        assert sorted(s.uri.rsplit("/", 1)[1] for s in cache.list()) == ["x", "z"]
    finally:
        await cache.close()
