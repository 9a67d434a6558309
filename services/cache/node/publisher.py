"""Mirroring cache entries to etcd (`Keys.cache_entry(node, id)`), best effort and ordered.

The cache never waits on etcd to serve data: records go through a queue that
keeps only the latest desired value per entry and retries with backoff while
etcd is away. This module owns the record's form: it writes it
(`entry_record`) and reads every node's back (`read_cluster_entries`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from gpufair.common.errors import Unavailable
from gpufair.common.etcd import EtcdState
from gpufair.common.keys import Keys
from gpufair.common.state import StateStore

from .status import EntryState, EntryStatus

logger = logging.getLogger(__name__)

Record = dict[str, Any]


def entry_record(s: EntryStatus, node: str) -> Record:
    """The JSON mirrored at `Keys.cache_entry(node, id)` (ListClusterEntries reads it)."""
    return {"uri": s.uri, "entry_id": s.entry_id, "node": node, "state": s.state.value, "path": s.path,
            "size": s.size_bytes, "last_use": s.last_use, "pin_owners": list(s.pin_owners),
            "verified": s.verified, "reason": s.reason}


def entry_from_record(rec: Record) -> EntryStatus:
    """The status an `entry_record` describes (ValueError/KeyError/TypeError if it is not one)."""
    owners = rec.get("pin_owners") or []
    return EntryStatus(uri=str(rec["uri"]), entry_id=str(rec["entry_id"]), state=EntryState(rec["state"]),
                       path=rec.get("path") or None, size_bytes=int(rec.get("size") or 0),
                       last_use=float(rec.get("last_use") or 0.0), pin_owners=tuple(str(o) for o in owners),
                       reason=str(rec.get("reason") or ""), verified=str(rec.get("verified") or ""))


async def read_cluster_entries(state: StateStore, keys: Keys) -> list[tuple[str, EntryStatus]]:
    """(node, status) of every node's mirrored entries, by node then URI; malformed records are skipped."""
    values, _ = await state.get_prefix(keys.cache_prefix())
    out = []
    for key, stored in values.items():
        node, _, rest = key[len(keys.cache_prefix()):].partition("/")
        if not rest.startswith("entries/"):
            continue  # the node's liveness key
        try:
            out.append((node, entry_from_record(stored.value)))
        except (KeyError, TypeError, ValueError):
            logger.warning("cache record %s is malformed; skipped", key)
    return sorted(out, key=lambda pair: (pair[0], pair[1].uri))


class EntryPublisher(Protocol):
    """Where entry records go (etcd in production, a dict in unit tests)."""

    async def put(self, entry_id: str, record: Record) -> None: ...
    async def delete(self, entry_id: str) -> None: ...
    async def list(self) -> dict[str, Record]: ...
    async def close(self) -> None: ...


class MemoryPublisher:
    """In-memory EntryPublisher for unit tests; `fail` simulates etcd being down."""

    def __init__(self) -> None:
        self.records: dict[str, Record] = {}
        self.fail = False

    async def put(self, entry_id: str, record: Record) -> None:
        self._check()
        self.records[entry_id] = dict(record)

    async def delete(self, entry_id: str) -> None:
        self._check()
        self.records.pop(entry_id, None)

    async def list(self) -> dict[str, Record]:
        self._check()
        return {k: dict(v) for k, v in self.records.items()}

    async def close(self) -> None:
        return None

    def _check(self) -> None:
        if self.fail:
            raise Unavailable("fake etcd is down")


class EtcdPublisher:
    """EntryPublisher over the process's etcd client (`EtcdState`); values are JSON.

    Given an endpoint instead of an `EtcdState` it opens (and later closes) its own.
    """

    def __init__(self, etcd: EtcdState | str, node: str, keys: Keys | None = None, timeout: int = 5) -> None:
        self._own = isinstance(etcd, str)
        self._state = EtcdState(etcd, timeout=timeout) if isinstance(etcd, str) else etcd
        self.endpoint = self._state.endpoint
        self.node = node
        self.keys = keys or Keys()
        self._prefix = self.keys.cache_node_prefix(node) + "entries/"

    async def put(self, entry_id: str, record: Record) -> None:
        await self._call(self._state.put(self.keys.cache_entry(self.node, entry_id), record))

    async def delete(self, entry_id: str) -> None:
        await self._call(self._state.delete(self.keys.cache_entry(self.node, entry_id)))

    async def list(self) -> dict[str, Record]:
        values, _ = await self._call(self._state.get_prefix(self._prefix))
        return {key[len(self._prefix):]: stored.value for key, stored in values.items()}

    async def close(self) -> None:
        if self._own:
            await self._state.close()

    async def _call(self, coro: Any) -> Any:
        import aetcd.exceptions

        try:
            return await coro
        except Unavailable:
            raise
        except (aetcd.exceptions.ClientError, OSError, ValueError) as exc:
            raise Unavailable(f"etcd at {self.endpoint} failed: {type(exc).__name__}") from None


class PublishQueue:
    """Latest-value-wins queue in front of a publisher, flushed by one background task."""

    def __init__(self, publisher: EntryPublisher, retry_s: float = 0.5) -> None:
        self.publisher = publisher
        self.retry_s = retry_s
        self._pending: dict[str, Record | None] = {}
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="cache-publish")

    def put(self, entry_id: str, record: Record | None) -> None:
        """Queue a record (None = delete); replaces anything queued for the entry."""
        self._pending[entry_id] = record
        self._idle.clear()
        self._wake.set()

    async def flush(self, timeout: float = 10.0) -> None:
        """Wait until everything queued has reached the publisher."""
        await asyncio.wait_for(self._idle.wait(), timeout)

    async def close(self) -> None:
        if self._task:
            try:
                await self.flush(timeout=2.0)
            except TimeoutError:
                logger.warning("cache records not published before shutdown: %d", len(self._pending))
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.publisher.close()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                entry_id, record = next(iter(self._pending.items()))
                try:
                    if record is None:
                        await self.publisher.delete(entry_id)
                    else:
                        await self.publisher.put(entry_id, record)
                except Unavailable as exc:
                    logger.warning("publishing cache entry %s failed: %s; retrying", entry_id, exc)
                    await asyncio.sleep(self.retry_s)
                    continue
                if self._pending.get(entry_id, 0) is record:
                    del self._pending[entry_id]
            self._idle.set()
