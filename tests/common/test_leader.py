"""Leader election behind the in-memory state: one leader, takeover, and a stop
that never deletes a successor's key."""

from __future__ import annotations

from gpufair.common.leader import LeaderElection
from gpufair.common.memstate import MemoryState
from gpufair.common.state import Json

KEY = "/t/scheduler/leader"


class _SuccessorFirst(MemoryState):
    """A store in which, armed, a successor takes the leader key just before the next delete
    of it reaches the store (the leader's lease ran out between its decision and its delete)."""

    armed = False

    def _successor(self, key: str) -> None:
        if self.armed and key == KEY:
            self.armed = False
            self._commit({KEY: {"identity": "successor"}}, [], leased=True)

    async def delete(self, key: str) -> bool:
        self._successor(key)
        return await super().delete(key)

    async def delete_if(self, key: str, *, value: Json | None = None, mod_revision: int | None = None) -> bool:
        self._successor(key)
        return await super().delete_if(key, value=value, mod_revision=mod_revision)


async def test_one_leader_and_the_standby_sees_it() -> None:
    state = MemoryState()
    a, b = LeaderElection(state, KEY, "a", retry_s=0.01), LeaderElection(state, KEY, "b", retry_s=0.01)
    a.start()
    assert await a.wait_leader(2)
    b.start()
    assert await b.wait_campaigned(2)
    assert (b.seen_leader, b.is_leader) == ("a", False)
    await a.stop()  # gives the key up at once
    assert await b.wait_leader(2)
    await b.stop()


async def test_the_standby_takes_over_when_the_leaders_lease_goes() -> None:
    state = MemoryState()
    a = LeaderElection(state, KEY, "a", retry_s=0.01)
    a.start()
    assert await a.wait_leader(2)
    state.expire_lease()  # the process died: etcd drops its lease-bound keys
    b = LeaderElection(state, KEY, "b", retry_s=0.01)
    b.start()
    assert await b.wait_leader(2)
    await b.stop()
    await a.stop()
    assert state.data == {}


async def test_stop_deletes_only_the_key_it_holds() -> None:
    state = _SuccessorFirst()
    a = LeaderElection(state, KEY, "a", retry_s=0.01)
    a.start()
    assert await a.wait_leader(2)
    state.armed = True
    await a.stop()
    stored = await state.get(KEY)
    assert stored is not None and stored.value == {"identity": "successor"}
