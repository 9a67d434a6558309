"""JobRegistry behind the in-memory state: registration, versioned splits in one
transaction, history pruning, live members, reads that follow the caller's own
writes, and a mirror indexed by job."""

from __future__ import annotations

import pytest

from gpufair.common.errors import AlreadyExists, NotFound, Unavailable
from gpufair.common.keys import Keys
from gpufair.common.memstate import MemoryState
from gpufair.common.state import StaleVersion
from gpufair.scheduler.jobs import JobSpec, Placement, Split
from gpufair.scheduler.registry import HISTORY_KEEP, JobRegistry

KEYS = Keys("/t")


def _spec(job: str, ranks: int = 2) -> JobSpec:
    return JobSpec(job, "resnet", 64, 6400, tuple(Placement(r, "n1", f"{job}-g{r}") for r in range(ranks)))


@pytest.fixture
async def reg():
    state = MemoryState()
    splits: list[tuple[str, int]] = []
    removed: list[str] = []
    registry = JobRegistry(state, KEYS, on_split=lambda j, s: splits.append((j, s.version)), on_removed=removed.append)
    registry.start_background()
    assert await registry.wait_ready(2)
    registry.state, registry.splits, registry.removed = state, splits, removed  # what the tests look at
    yield registry
    await registry.stop()


async def test_register_returns_the_job_with_its_initial_split_at_once(reg) -> None:
    view = await reg.register(_spec("a"), (32, 32), "even")
    assert view.split is not None and view.split.batch_sizes == (32, 32) and view.split.policy == "even"
    assert reg.view("a") == view and [v.spec.job_id for v in reg.views()] == ["a"]
    assert reg.splits == [("a", view.split.version)]


async def test_registering_again_is_idempotent_but_a_different_spec_is_refused(reg) -> None:
    first = await reg.register(_spec("a"), (32, 32), "even")
    assert (await reg.register(_spec("a"), (40, 24), "balance")).split == first.split  # the split stays
    with pytest.raises(AlreadyExists):
        await reg.register(_spec("a", ranks=4), (16, 16, 16, 16), "even")


async def test_a_split_is_one_transaction_and_never_goes_backwards(reg) -> None:
    view = await reg.register(_spec("a"), (32, 32), "even")
    v = view.split.version
    writes = reg.state.writes
    await reg.write_split("a", Split(v + 1, 10, (40, 24), "balance", "why", 1.0))
    assert reg.state.writes == writes + 1  # split, history entry and pruning together
    with pytest.raises(StaleVersion):
        await reg.write_split("a", Split(v, 11, (8, 56), "balance", "late writer", 2.0))
    assert [h.version for h in await reg.history("a", 10)] == [v + 1, v]


async def test_history_keeps_the_newest_entries_only(reg) -> None:
    v = (await reg.register(_spec("a"), (32, 32), "even")).split.version
    for i in range(1, HISTORY_KEEP + 5):
        await reg.write_split("a", Split(v + i, i, (33, 31), "balance", "", float(i)))
    history = await reg.history("a", 10_000)
    assert len(history) == HISTORY_KEEP and history[0].version == v + HISTORY_KEEP + 4
    assert history[-1].version == v + 5


async def test_pin_issues_the_next_version_and_the_mirror_has_it_on_return(reg) -> None:
    v = (await reg.register(_spec("a"), (32, 32), "even")).split.version
    pinned = await reg.pin("a", (48, 16))
    assert pinned.version == v + 1 and reg.view("a").pinned == (48, 16) and reg.split("a") == pinned
    assert await reg.set_pin("a", None) and reg.view("a").pinned is None


async def test_members_count_live_ranks_and_a_late_leave_keeps_a_reconnected_rank(reg) -> None:
    await reg.register(_spec("a"), (32, 32), "even")
    await reg.register(_spec("a1"), (32, 32), "even")  # a job whose id extends another's
    old = await reg.join("a", 0, "replica-x")
    await reg.join("a", 1, "replica-x")
    new = await reg.join("a", 0, "replica-y")  # rank 0 reconnected elsewhere
    await reg.join("a1", 0, "replica-x")
    await reg.leave("a", 0, old)  # the old stream's cleanup runs late
    await reg.wait_seen(reg.state.revision)
    assert reg.view("a").live_ranks == 2 and reg.view("a1").live_ranks == 1
    await reg.leave("a", 0, new)
    reg.state.expire_lease()  # the replica holding the rest died
    await reg.wait_seen(reg.state.revision)
    assert reg.view("a").live_ranks == 0 and reg.view("a1").live_ranks == 0


async def test_purge_removes_every_key_and_tells_the_streams(reg) -> None:
    await reg.register(_spec("a"), (32, 32), "even")
    await reg.register(_spec("b"), (32, 32), "even")
    assert await reg.purge("a") and not await reg.purge("a")
    assert reg.removed == ["a"] and [v.spec.job_id for v in reg.views()] == ["b"]
    assert not [k for k in reg.state.data if "/a/" in k]
    with pytest.raises(NotFound):
        reg.view("a")


async def test_a_malformed_value_is_left_out_without_hiding_other_jobs(reg) -> None:
    await reg.register(_spec("b"), (32, 32), "even")
    revision = await reg.state.put(KEYS.job_spec("bad"), {"not": "a spec"})
    await reg.wait_seen(revision)
    assert [v.spec.job_id for v in reg.views()] == ["b"]


async def test_reads_before_the_first_full_read_are_unavailable() -> None:
    registry = JobRegistry(MemoryState(), KEYS)
    with pytest.raises(Unavailable, match="retry"):
        registry.view("a")


async def test_a_write_the_mirror_does_not_see_in_time_is_unavailable_not_a_stale_read(monkeypatch) -> None:
    import gpufair.scheduler.registry as registry_module

    monkeypatch.setattr(registry_module, "MIRROR_WAIT_S", 0.2)
    state = MemoryState()
    registry = JobRegistry(state, KEYS)
    registry.start_background()
    assert await registry.wait_ready(2)
    await registry.stop()  # the mirror stops following etcd
    with pytest.raises(Unavailable, match="behind"):
        await registry.register(_spec("a"), (32, 32), "even")
