"""Read a prefix, then watch it from that revision: a local mirror of etcd keys
(patroni's `KVCache`). A writer waits for the mirror to reach the revision of
its own write (`wait_revision`) rather than polling it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gpufair.common.errors import Unavailable
from gpufair.common.tasks import cancel_watch, stop_task, within
from gpufair.common.state import Json, StateStore

logger = logging.getLogger(__name__)


class PrefixCache:
    """Keeps `values` equal to etcd's keys under `prefix`.

    On any watch failure (etcd restart, compaction) it re-reads the prefix and
    watches again from the new revision, so no event is missed or applied twice.
    """

    def __init__(self, state: StateStore, prefix: str, *, on_change: Callable[[str, Json | None], None] | None = None) -> None:
        self._state = state
        self.prefix = prefix
        self.values: dict[str, Json] = {}
        self.revision = 0
        self._on_change = on_change
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"watch {self.prefix}")

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    async def wait_ready(self, timeout: float | None = None) -> bool:
        return await within(self._ready.wait(), timeout)

    async def wait_revision(self, revision: int, timeout: float | None = None) -> bool:
        """True once the mirror has applied every change up to `revision` (a
        write's own revision), False if `timeout` passed first."""
        if self.revision >= revision and self.ready:
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((revision, future))
        try:
            return await within(asyncio.shield(future), timeout)
        finally:
            self._waiters = [(r, f) for r, f in self._waiters if f is not future]

    def _advance(self, revision: int) -> None:
        self.revision = max(self.revision, revision)
        for wanted, future in self._waiters:
            if wanted <= self.revision and not future.done():
                future.set_result(None)

    async def stop(self) -> None:
        await stop_task(self._task)

    async def _run(self) -> None:
        while True:
            try:
                await self._sync_and_watch()
            except asyncio.CancelledError:
                raise
            except Unavailable:
                logger.debug("watch %s: etcd unreachable, retrying", self.prefix)
            except Exception:  # noqa: BLE001 - the mirror must keep trying
                logger.exception("watch %s failed; re-reading", self.prefix)
            await asyncio.sleep(0.5)

    async def _sync_and_watch(self) -> None:
        values, revision = await self._state.get_prefix(self.prefix)
        fresh = {k: v.value for k, v in values.items()}
        for key in set(self.values) - set(fresh):
            self._notify(key, None)
        for key, value in fresh.items():
            if self.values.get(key) != value:
                self._notify(key, value)
        self.values = fresh
        self._ready.set()
        self._advance(revision)
        watch = await self._state.watch_prefix(self.prefix, revision + 1)
        try:
            async for event in watch:
                if event.value is None:
                    self.values.pop(event.key, None)
                else:
                    self.values[event.key] = event.value
                self._notify(event.key, event.value)
                self._advance(event.revision)
        finally:
            await cancel_watch(watch)

    def _notify(self, key: str, value: Json | None) -> None:
        if self._on_change is None:
            return
        try:
            self._on_change(key, value)
        except Exception:  # noqa: BLE001 - a listener bug must not stop the mirror
            logger.exception("prefix cache listener failed for %s", key)
