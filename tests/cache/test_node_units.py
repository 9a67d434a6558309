"""Pure parts of the node cache: config, ETag checks, LRU choice, admission order, publishing."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from gpufair.cache.node import EntryState, IntegrityError, MemoryPublisher, NodeCacheConfig, parse_size
from gpufair.cache.node.gate import PriorityGate
from gpufair.cache.node.index import Entry, Index
from gpufair.cache.node.publisher import PublishQueue
from gpufair.cache.node.status import ObjectSpec
from gpufair.cache.node.verify import candidate_part_sizes, file_md5s, verify_object
from gpufair.common.errors import FailedPrecondition, GpufairError, InvalidArgument, ResourceExhausted
from gpufair.common.keys import check_segment


def test_config_from_env_reads_sizes_and_refuses_nonsense(tmp_path):
    cfg = NodeCacheConfig.from_env({"GPUFAIR_CACHE_DIR": str(tmp_path), "GPUFAIR_CACHE_CAPACITY": "2GiB",
                                    "GPUFAIR_NODE": "gpu-node-1", "GPUFAIR_CACHE_PART_SIZE": "16MiB",
                                    "GPUFAIR_S3_SECRET_KEY": "hush"})
    assert (cfg.capacity_bytes, cfg.part_size, cfg.node) == (2 << 30, 16 << 20, "gpu-node-1")
    assert "hush" not in repr(cfg)
    assert parse_size("500MB") == 500_000_000
    with pytest.raises(InvalidArgument, match="expected a size"):
        parse_size("lots")
    with pytest.raises(InvalidArgument, match="positive"):
        NodeCacheConfig(cache_dir=tmp_path, capacity_bytes=0)
    with pytest.raises(ValueError, match="node"):
        NodeCacheConfig(cache_dir=tmp_path, capacity_bytes=1, node="a/b")


def _md5(b: bytes) -> str:
    return hashlib.md5(b).hexdigest()


def test_verify_accepts_md5_and_multipart_etags_and_rejects_mismatches(tmp_path):
    data = bytes(range(256)) * 4096 * 11  # 11 MiB
    path = tmp_path / "f"
    path.write_bytes(data)
    mib5 = 5 << 20
    parts = [data[i:i + mib5] for i in range(0, len(data), mib5)]
    multi = _md5(b"".join(hashlib.md5(p).digest() for p in parts)) + "-3"
    assert verify_object(str(path), ObjectSpec("k", "f", len(data), _md5(data)), "x", 1 << 20, []) == "md5"
    assert verify_object(str(path), ObjectSpec("k", "f", len(data), multi), "x", 1 << 20, []) == "multipart-md5"
    assert verify_object(str(path), ObjectSpec("k", "f", len(data), "0" * 32 + "-7"), "x", 1 << 20, []) == "size"
    with pytest.raises(IntegrityError, match="does not match ETag"):
        verify_object(str(path), ObjectSpec("k", "f", len(data), _md5(b"other")), "x", 1 << 20, [])
    with pytest.raises(IntegrityError, match="S3 says"):
        verify_object(str(path), ObjectSpec("k", "f", len(data) + 1, _md5(data)), "x", 1 << 20, [])


def test_file_md5s_slices_and_part_size_candidates(tmp_path):
    path = tmp_path / "f"
    for data in (b"", b"abc", b"x" * 10):
        path.write_bytes(data)
        assert b"".join(file_md5s(str(path), 4)) == b"".join(
            hashlib.md5(data[i:i + 4]).digest() for i in range(0, max(len(data), 1), 4))
    assert 8 << 20 in candidate_part_sizes(20 << 20, 3)
    assert all(-(-(20 << 20) // p) == 3 for p in candidate_part_sizes(20 << 20, 3))


def _cached(idx: Index, name: str, size: int, last_use: float) -> Entry:
    from gpufair.cache.node.disk import EntryMeta, FileMeta

    uri = f"s3://bkt/{name}"
    meta = EntryMeta(uri, name, False, (FileMeta(name, name, size, "", "size"),), 0.0, last_use)
    e = Entry(uri, name, EntryState.CACHED, meta=meta, last_use=last_use)
    idx.entries[name] = e
    return e


def test_victims_are_least_recently_used_unpinned_and_too_large_is_refused():
    idx = Index(capacity=100)
    old, mid, new = _cached(idx, "old", 30, 1.0), _cached(idx, "mid", 30, 2.0), _cached(idx, "new", 30, 3.0)
    idx.pins["s3://bkt/old"] = {"step"}
    incoming = Entry("s3://bkt/in", "in", EntryState.FETCHING)
    assert idx.victims_for(incoming, 10) == []
    assert idx.victims_for(incoming, 40) == [mid]
    assert idx.victims_for(incoming, 70) == [mid, new]
    with pytest.raises(ResourceExhausted, match="needs 71 bytes but at most 70 .*\\(30 bytes pinned"):
        idx.victims_for(incoming, 71)
    assert old in idx.entries.values()


async def test_gate_admits_nearest_deadline_then_highest_priority():
    gate = PriorityGate(1)
    await gate.acquire()
    order: list[str] = []

    async def take(name: str, prio: int, deadline: float | None) -> None:
        await gate.acquire(prio, deadline)
        order.append(name)
        gate.release()

    tasks = [asyncio.create_task(take(*a)) for a in
             [("low", 0, None), ("high", 5, None), ("soon", 0, 10.0), ("later", 9, 20.0)]]
    await asyncio.sleep(0)  # let all four queue up
    gate.release()
    await asyncio.gather(*tasks)
    assert order == ["soon", "later", "high", "low"]


async def test_publish_queue_keeps_latest_value_and_retries_while_down():
    pub = MemoryPublisher()
    q = PublishQueue(pub, retry_s=0.01)
    q.start()
    pub.fail = True
    q.put("e1", {"v": 1})
    q.put("e1", {"v": 2})
    q.put("e2", {"v": 1})
    q.put("e2", None)
    with pytest.raises(TimeoutError):
        await q.flush(timeout=0.1)
    pub.fail = False
    await q.flush(timeout=5)
    assert pub.records == {"e1": {"v": 2}}
    await q.close()
