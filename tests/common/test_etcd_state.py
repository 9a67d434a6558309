"""The etcd state layer against a real etcd server."""

from __future__ import annotations

import asyncio

import aetcd.exceptions
import grpc
import pytest

from gpufair.common.errors import Unavailable
from gpufair.common.etcd import EtcdState, StaleVersion
from gpufair.common.keys import Keys
from gpufair.common.leader import LeaderElection
from gpufair.common.watchcache import PrefixCache
from gpufair.local import free_port


async def _until(predicate, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


@pytest.fixture
async def state(etcd_endpoint: str):
    s = EtcdState(etcd_endpoint, lease_ttl=2)
    yield s
    await s.close()


async def test_stale_writer_cannot_overwrite_newer_split_version(state: EtcdState, etcd_root: str) -> None:
    key = Keys(etcd_root).job_split("job-a")
    await state.put_versioned(key, {"version": 2, "batch_sizes": [16, 16]})
    await state.put_versioned(key, {"version": 3, "batch_sizes": [24, 8]})
    with pytest.raises(StaleVersion):
        await state.put_versioned(key, {"version": 2, "batch_sizes": [1, 31]})
    with pytest.raises(StaleVersion):
        await state.put_versioned(key, {"version": 3, "batch_sizes": [1, 31]})
    stored = await state.get(key)
    assert stored is not None and stored.value == {"version": 3, "batch_sizes": [24, 8]}


async def test_concurrent_versioned_writers_end_at_the_highest_version(state: EtcdState, etcd_root: str) -> None:
    key = Keys(etcd_root).job_split("job-b")

    async def write(v: int) -> None:
        try:
            await state.put_versioned(key, {"version": v})
        except StaleVersion:
            pass

    await asyncio.gather(*(write(v) for v in [5, 1, 9, 3, 7, 2, 8]))
    stored = await state.get(key)
    assert stored is not None and stored.value["version"] == 9


async def test_liveness_key_vanishes_when_lease_is_revoked(state: EtcdState, etcd_endpoint: str, etcd_root: str) -> None:
    key = Keys(etcd_root).job_member("job-c", 0)
    await state.put_live(key, {"rank": 0})
    other = EtcdState(etcd_endpoint)
    try:
        assert await other.get(key) is not None
        await state.revoke_lease_for_test()
        assert await other.get(key) is None
    finally:
        await other.close()


async def test_standby_takes_over_within_lease_ttl_when_leader_dies(etcd_endpoint: str, etcd_root: str) -> None:
    key = Keys(etcd_root).leader()
    a_state, b_state = EtcdState(etcd_endpoint, lease_ttl=2), EtcdState(etcd_endpoint, lease_ttl=2)
    a = LeaderElection(a_state, key, "replica-a", retry_s=0.1)
    b = LeaderElection(b_state, key, "replica-b", retry_s=0.1)
    try:
        a.start()
        assert await a.wait_leader(5)
        b.start()
        assert await b.wait_campaigned(5)  # b has campaigned, read the key, and lost
        assert b.seen_leader == "replica-a" and not b.is_leader and await b.current_leader() == "replica-a"
        # Simulate a crash: stop refreshing the lease without revoking it.
        a_state._keepalive.cancel()  # noqa: SLF001 - a crash as seen by etcd
        a._task.cancel()  # noqa: SLF001
        t0 = asyncio.get_running_loop().time()
        assert await b.wait_leader(2 + 3), "standby did not take over within TTL + slack"
        assert asyncio.get_running_loop().time() - t0 <= 2 + 3
        assert await b.current_leader() == "replica-b"
    finally:
        await b.stop()
        await b_state.close()
        await a_state.close()


async def test_prefix_cache_mirrors_puts_and_deletes_after_initial_read(state: EtcdState, etcd_root: str) -> None:
    prefix = Keys(etcd_root).jobs_prefix()
    await state.put(prefix + "j1/spec", {"n": 1})
    seen: list[tuple[str, object]] = []
    cache = PrefixCache(state, prefix, on_change=lambda k, v: seen.append((k, v)))
    cache.start()
    try:
        assert await cache.wait_ready(5)
        assert cache.values == {prefix + "j1/spec": {"n": 1}}
        await state.put(prefix + "j2/spec", {"n": 2})
        await state.delete(prefix + "j1/spec")
        await _until(lambda: cache.values == {prefix + "j2/spec": {"n": 2}})
        assert (prefix + "j1/spec", None) in seen
    finally:
        await cache.stop()


async def test_unreachable_etcd_raises_unavailable() -> None:
    s = EtcdState(f"127.0.0.1:{free_port()}", timeout=1)
    try:
        assert not await s.ping()
        with pytest.raises(Unavailable):
            await s.get("/gpufair/x")
    finally:
        await s.close()


async def test_a_stream_broken_in_grpc_core_reads_as_unreachable_not_as_an_etcd_error() -> None:
    # etcd stopping under a lease keepalive surfaced as INTERNAL "Internal error from Core"
    # (CI, stop 49): the link broke, so it is Unavailable; etcd's own INTERNAL is not.
    s = EtcdState(f"127.0.0.1:{free_port()}", timeout=1)
    try:
        core = grpc.aio.AioRpcError(grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                    details="Internal error from Core")
        assert isinstance(s.unavailable(core), Unavailable)
        assert isinstance(s.unavailable(aetcd.exceptions.InternalError("Internal error from Core")), Unavailable)
        assert s.unavailable(aetcd.exceptions.InternalError("etcdserver: corrupt cluster")) is None
        server = grpc.aio.AioRpcError(grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                      details="etcdserver: corrupt cluster")
        assert s.unavailable(server) is None
    finally:
        await s.close()


async def test_concurrent_first_users_share_one_lease(etcd_endpoint: str, etcd_root: str) -> None:
    s = EtcdState(etcd_endpoint, lease_ttl=2)
    try:
        keys = [f"{etcd_root}/live/{i}" for i in range(8)]
        await asyncio.gather(*(s.put_live(k, {"i": i}) for i, k in enumerate(keys)))
        leases = {(await s.client.get(k.encode())).lease for k in keys}
        assert len(leases) == 1  # every key under the one kept-alive lease
        await asyncio.sleep(2 * 2 + 0.5)  # past the TTL: the keepalive holds it
        assert all([await s.get(k) is not None for k in keys])
    finally:
        await s.close()


async def test_owner_checked_delete_leaves_a_newer_owners_key(state: EtcdState, etcd_root: str) -> None:
    key = Keys(etcd_root).job_member("job-d", 0)
    await state.put_live(key, {"stream": "old"})
    await state.put_live(key, {"stream": "new"})  # the rank reconnected
    assert not await state.delete_live(key, {"stream": "old"})  # the old stream's cleanup runs late
    stored = await state.get(key)
    assert stored is not None and stored.value == {"stream": "new"}
    assert await state.delete_live(key, {"stream": "new"})
    assert await state.get(key) is None
