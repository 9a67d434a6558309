"""Read a prefix, then watch it from that revision: a local mirror of etcd keys."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from gpufair.common.errors import Unavailable
from gpufair.common.etcd import EtcdState, Json, cancel_watch, stop_task

logger = logging.getLogger(__name__)


class PrefixCache:
    """Keeps `values` equal to etcd's keys under `prefix`.

    On any watch failure (etcd restart, compaction) it re-reads the prefix and
    watches again from the new revision, so no event is missed or applied twice.
    """

    def __init__(self, state: EtcdState, prefix: str, *, on_change: Callable[[str, Json | None], None] | None = None) -> None:
        self._state = state
        self.prefix = prefix
        self.values: dict[str, Json] = {}
        self.revision = 0
        self._on_change = on_change
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"watch {self.prefix}")

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    async def wait_ready(self, timeout: float | None = None) -> bool:
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

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
        self.values, self.revision = fresh, revision
        self._ready.set()
        watch = await self._state.watch_prefix(self.prefix, revision + 1)
        try:
            async for event in watch:
                key = event.kv.key.decode()
                self.revision = max(self.revision, event.kv.mod_revision)
                if event.kind == "DELETE":
                    self.values.pop(key, None)
                    self._notify(key, None)
                else:
                    value = json.loads(event.kv.value)
                    self.values[key] = value
                    self._notify(key, value)
        finally:
            await cancel_watch(watch)

    def _notify(self, key: str, value: Json | None) -> None:
        if self._on_change is None:
            return
        try:
            self._on_change(key, value)
        except Exception:  # noqa: BLE001 - a listener bug must not stop the mirror
            logger.exception("prefix cache listener failed for %s", key)
