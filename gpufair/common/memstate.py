"""An in-memory `StateStore` for unit tests and benchmarks: etcd's semantics that
gpufair relies on (revisions, compare-and-swap, a lease, ordered watches), in
one process. `down` makes every call raise Unavailable, as an outage would."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Mapping

from gpufair.common.errors import Unavailable
from gpufair.common.state import Json, StaleVersion, Stored, WatchEvent


class _MemoryWatch:
    def __init__(self, store: MemoryState, prefix: str) -> None:
        self._store, self._prefix = store, prefix
        self.queue: asyncio.Queue[WatchEvent | None] = asyncio.Queue()

    def offer(self, event: WatchEvent) -> None:
        if event.key.startswith(self._prefix):
            self.queue.put_nowait(event)

    async def __aiter__(self) -> AsyncIterator[WatchEvent]:
        while (event := await self.queue.get()) is not None:
            yield event
        raise Unavailable("fake etcd went down during a watch")

    async def cancel(self) -> None:
        self._store.watches.discard(self)


class MemoryState:
    """Keys -> (JSON value, mod revision, create revision, leased?) with one global revision."""

    def __init__(self) -> None:
        self.data: dict[str, Stored] = {}
        self.leased: set[str] = set()
        self.revision = 1
        self.log: list[WatchEvent] = []
        self.watches: set[_MemoryWatch] = set()
        self.down = False
        self.writes = 0  # write transactions made, so tests can count them

    def _check(self) -> None:
        if self.down:
            raise Unavailable("fake etcd is down")

    def set_down(self, down: bool) -> None:
        """Take the store away (watches end with Unavailable) or bring it back."""
        self.down = down
        if down:
            for w in list(self.watches):
                w.queue.put_nowait(None)
            self.watches.clear()

    def _commit(self, puts: Mapping[str, Json], deletes: list[str], *, leased: bool = False) -> int:
        """Apply one transaction at a new revision and tell the watches (a no-op leaves the revision, as in etcd)."""
        deletes = [k for k in deletes if k in self.data]
        if not puts and not deletes:
            return self.revision
        self.revision += 1
        self.writes += 1
        for key, value in puts.items():
            old = self.data.get(key)
            value = json.loads(json.dumps(value))  # stored as etcd stores it: a copy, JSON only
            self.data[key] = Stored(value, self.revision, old.create_revision if old else self.revision)
            (self.leased.add if leased else self.leased.discard)(key)
            self._emit(WatchEvent(key, copy.deepcopy(value), self.revision))
        for key in deletes:
            if self.data.pop(key, None) is not None:
                self.leased.discard(key)
                self._emit(WatchEvent(key, None, self.revision))
        return self.revision

    def _emit(self, event: WatchEvent) -> None:
        self.log.append(event)
        for w in list(self.watches):
            w.offer(event)

    def expire_lease(self) -> None:
        """Drop every lease-bound key, as etcd does when a process dies."""
        self._commit({}, sorted(self.leased))

    # --- StateStore ---------------------------------------------------------

    async def ping(self) -> bool:
        return not self.down

    async def close(self) -> None:
        self.expire_lease()

    async def get(self, key: str) -> Stored | None:
        self._check()
        stored = self.data.get(key)
        return None if stored is None else Stored(copy.deepcopy(stored.value), stored.mod_revision, stored.create_revision)

    async def put(self, key: str, value: Json) -> int:
        self._check()
        return self._commit({key: value}, [])

    async def delete(self, key: str) -> int:
        self._check()
        return self._commit({}, [key]) if key in self.data else 0

    async def delete_prefix(self, prefix: str) -> int:
        self._check()
        keys = [k for k in self.data if k.startswith(prefix)]
        return self._commit({}, keys) if keys else 0

    async def get_prefix(self, prefix: str) -> tuple[dict[str, Stored], int]:
        self._check()
        return {k: (await self.get(k)) for k in sorted(self.data) if k.startswith(prefix)}, self.revision  # type: ignore[misc]

    async def create_if_absent(self, key: str, value: Json, *, leased: bool = False) -> int:
        self._check()
        return 0 if key in self.data else self._commit({key: value}, [], leased=leased)

    async def put_versioned(self, key: str, value: Json, *, also: Mapping[str, Json] | None = None,
                            delete_range: tuple[str, str] | None = None) -> int:
        self._check()
        current = self.data.get(key)
        if current is not None and int(current.value.get("version", -1)) >= int(value["version"]):
            raise StaleVersion(f"{key}: version {value['version']} is not newer than stored {current.value.get('version')}")
        start, end = delete_range or ("", "")
        return self._commit({key: value, **(also or {})}, [k for k in self.data if start <= k < end])

    async def delete_if(self, key: str, *, value: Json | None = None, mod_revision: int | None = None) -> bool:
        self._check()
        stored = self.data.get(key)
        if stored is None or (value is not None and stored.value != value) or \
                (mod_revision is not None and stored.mod_revision != mod_revision):
            return False
        self._commit({}, [key])
        return True

    async def put_live(self, key: str, value: Json) -> None:
        self._check()
        self._commit({key: value}, [], leased=True)

    async def delete_live(self, key: str, value: Json | None = None) -> bool:
        if value is None:
            return bool(await self.delete(key))
        return await self.delete_if(key, value=value)

    async def watch_prefix(self, prefix: str, start_revision: int) -> _MemoryWatch:
        self._check()
        watch = _MemoryWatch(self, prefix)
        for event in self.log:
            if event.revision >= start_revision:
                watch.offer(event)
        self.watches.add(watch)
        return watch
