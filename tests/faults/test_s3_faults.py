"""S3 slow, changing under a fetch, or down, seen through the cache's gRPC API: clear states, no partial data, capacity held."""

from __future__ import annotations

import asyncio
import io
import os
from pathlib import Path

import grpc
import pytest
from minio import Minio

from gpufair.api.cache.v1 import cache_service_pb2 as pb
from gpufair.api.cache.v1 import cache_service_pb2_grpc as pb_grpc
from gpufair.cache.app import start_node
from gpufair.cache.node.config import NodeCacheConfig
from gpufair.common.config import CommonConfig
from gpufair.local import S3Server
from fault_support import SlowProxy, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]
KiB = 1024
CAPACITY = 1536 * KiB


async def _entry(stub: pb_grpc.CacheServiceStub, uri: str) -> pb.Entry:
    return (await stub.Resolve(pb.ResolveRequest(uri=uri), timeout=10)).entry


def _on_disk(cache_dir: Path) -> int:
    return sum(p.stat().st_size for p in cache_dir.rglob("*") if p.is_file())


async def test_cache_states_under_slow_changing_and_dead_s3(tmp_path: Path, etcd_endpoint: str, etcd_root: str) -> None:
    s3 = S3Server(workdir=tmp_path / "s3").start()
    client = Minio(s3.endpoint, access_key=s3.access_key, secret_key=s3.secret_key, secure=False)
    client.make_bucket("bkt")
    old, new = os.urandom(512 * KiB), os.urandom(520 * KiB)
    client.put_object("bkt", "changing.bin", io.BytesIO(old), len(old))
    for i in range(3):
        client.put_object("bkt", f"fill-{i}.bin", io.BytesIO(bytes([i]) * 600 * KiB), 600 * KiB)
    client.put_object("bkt", "later.bin", io.BytesIO(b"l" * 100 * KiB), 100 * KiB)
    client.put_object("bkt", "huge.bin", io.BytesIO(b"h" * 2 * CAPACITY), 2 * CAPACITY)
    proxy = await SlowProxy(s3.port, rate=256 * KiB).start()
    cfg = NodeCacheConfig(cache_dir=tmp_path / "cache", capacity_bytes=CAPACITY, node="n1", part_size=64 * KiB, max_concurrency=2, chunk_size=32 * KiB,
                          s3_endpoint=proxy.endpoint, s3_access_key=s3.access_key, s3_secret_key=s3.secret_key, retries=2)
    node = await start_node(CommonConfig(listen="127.0.0.1:0", etcd=etcd_endpoint, etcd_root=etcd_root), cfg)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{node.server.port}") as ch:
            stub = pb_grpc.CacheServiceStub(ch)
            # Slow S3: FETCHING with progress and no local path until the whole object is verified.
            uri = "s3://bkt/changing.bin"
            first = (await stub.Prefetch(pb.PrefetchRequest(uri=uri))).entry
            assert first.state in (pb.ENTRY_STATE_FETCHING, pb.ENTRY_STATE_ABSENT) and not first.local_path
            await until(lambda: _has_progress(stub, uri), 20, "fetch progress")
            mid = await _entry(stub, uri)
            assert mid.state == pb.ENTRY_STATE_FETCHING and not mid.local_path and mid.bytes_done < len(old)
            # The object changes under the fetch: the result is the new object whole, or a clear failure.
            await asyncio.to_thread(client.put_object, "bkt", "changing.bin", io.BytesIO(new), len(new))
            await until(lambda: _settled(stub, uri), 30, "the changed fetch settles")
            done = await _entry(stub, uri)
            if done.state == pb.ENTRY_STATE_CACHED:
                assert Path(done.local_path).read_bytes() == new, "served a mix of two versions of an object"
            else:
                assert done.state == pb.ENTRY_STATE_FAILED and done.error and not done.local_path

            # Capacity: more data than fits is fetched one after another, never more than the capacity on disk.
            for i in range(3):
                await stub.Prefetch(pb.PrefetchRequest(uri=f"s3://bkt/fill-{i}.bin"))
                await until(lambda: _settled(stub, f"s3://bkt/fill-{i}.bin"), 30, f"fill-{i} settles")
                listed = await stub.ListEntries(pb.ListEntriesRequest())
                assert listed.used_bytes <= listed.capacity_bytes == CAPACITY
                assert _on_disk(cfg.cache_dir) <= CAPACITY
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.Prefetch(pb.PrefetchRequest(uri="s3://bkt/huge.bin"))
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.value.details()

            # S3 down: a new fetch fails with a reason, retried on request, and nothing partial is left.
            s3.child.kill()
            uri = "s3://bkt/later.bin"
            try:
                await stub.Prefetch(pb.PrefetchRequest(uri=uri), timeout=60)
            except grpc.aio.AioRpcError as exc:
                assert exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND), exc.details()
            await until(lambda: _settled(stub, uri), 60, "the fetch from a dead S3 gives up")
            failed = await _entry(stub, uri)
            assert failed.state == pb.ENTRY_STATE_FAILED and failed.error and not failed.local_path
            with pytest.raises(grpc.aio.AioRpcError) as err:
                async for _ in stub.ReadObject(pb.ReadObjectRequest(uri=uri), timeout=60):
                    pass
            assert err.value.code() != grpc.StatusCode.INTERNAL, err.value.details()
            assert _on_disk(cfg.cache_dir) <= CAPACITY
    finally:
        await node.close()
        await proxy.close()
        s3.close()


async def _has_progress(stub: pb_grpc.CacheServiceStub, uri: str) -> bool:
    e = await _entry(stub, uri)
    return e.state == pb.ENTRY_STATE_FETCHING and e.bytes_done > 0


async def _settled(stub: pb_grpc.CacheServiceStub, uri: str) -> bool:
    return (await _entry(stub, uri)).state in (pb.ENTRY_STATE_CACHED, pb.ENTRY_STATE_FAILED)
