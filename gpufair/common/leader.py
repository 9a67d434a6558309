"""Leader election over etcd: own a key by create-if-absent under the process lease.

Only the leader runs the decision loop; every replica serves reads and streams.
A leader that crashes stops refreshing its lease, etcd deletes the key when the
TTL runs out, and a standby's campaign succeeds on the delete event.
"""

from __future__ import annotations

import asyncio
import logging
import time

from gpufair.common.errors import Unavailable
from gpufair.common.tasks import cancel_watch, stop_task, within
from gpufair.common.state import StateStore

logger = logging.getLogger(__name__)


class LeaderElection:
    """Campaign for `key` as `identity`; `is_leader` tells the current state."""

    def __init__(self, state: StateStore, key: str, identity: str, *, retry_s: float = 0.5) -> None:
        self._state = state
        self._key = key
        self.identity = identity
        self._retry_s = retry_s
        self._leader = asyncio.Event()
        self._held_revision = 0  # the leader key's mod revision while this replica holds it
        self._seen = asyncio.Event()  # set once a campaign has read who leads
        self.seen_leader: str | None = None  # the leader the latest campaign read
        self._task: asyncio.Task[None] | None = None

    @property
    def is_leader(self) -> bool:
        return self._leader.is_set()

    async def wait_leader(self, timeout: float | None = None) -> bool:
        return await within(self._leader.wait(), timeout)

    async def wait_campaigned(self, timeout: float | None = None) -> bool:
        """True once a campaign has read who leads (`seen_leader`)."""
        return await within(self._seen.wait(), timeout)

    def start(self) -> None:
        self._task = asyncio.create_task(self._campaign(), name=f"campaign {self._key}")

    async def stop(self) -> None:
        """Stop campaigning and give leadership up at once (not after the TTL)."""
        await stop_task(self._task)
        if self.is_leader:
            self._leader.clear()
            try:
                # Checked in the delete itself: a successor's key, written since, stays.
                await self._state.delete_if(self._key, mod_revision=self._held_revision)
            except Unavailable:
                pass  # the lease expires it

    async def current_leader(self) -> str | None:
        stored = await self._state.get(self._key)
        return None if stored is None else str(stored.value.get("identity"))

    async def _campaign(self) -> None:
        while True:
            try:
                await self._campaign_once()
            except asyncio.CancelledError:
                raise
            except Unavailable:
                self._step_down("etcd unreachable")
            except Exception:  # noqa: BLE001 - keep campaigning whatever happens
                logger.exception("leader campaign failed")
                self._step_down("campaign error")
            await asyncio.sleep(self._retry_s)

    async def _campaign_once(self) -> None:
        value = {"identity": self.identity, "since_unix_s": time.time()}
        if await self._state.create_if_absent(self._key, value, leased=True):
            logger.info("%s became leader of %s", self.identity, self._key)
            self._leader.set()
        stored = await self._state.get(self._key)
        if stored is None:
            return  # deleted in between: campaign again at once
        self.seen_leader = str(stored.value.get("identity"))
        if self.seen_leader == self.identity:
            self._held_revision = stored.mod_revision
            self._leader.set()
        else:
            self._step_down(f"leader is {self.seen_leader}")
        self._seen.set()
        # Wait until the key changes (deleted by TTL, or rewritten).
        watch = await self._state.watch_prefix(self._key, stored.mod_revision + 1)
        try:
            async for event in watch:
                if event.value is None:
                    self._step_down("leader key deleted")
                    return
        finally:
            await cancel_watch(watch)

    def _step_down(self, why: str) -> None:
        if self._leader.is_set():
            logger.warning("%s lost leadership: %s", self.identity, why)
            self._leader.clear()

