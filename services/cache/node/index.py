"""The in-memory index: entries, byte accounting, pins and LRU victim choice (no I/O)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from gpufair.common.errors import ResourceExhausted

from .disk import EntryMeta
from .fetcher import FetchTracker
from .status import EntryState, EntryStatus, Progress


@dataclass
class Entry:
    """Mutable bookkeeping for one dataset; callers only ever see `EntryStatus` snapshots."""

    uri: str
    entry_id: str
    state: EntryState
    meta: EntryMeta | None = None
    path: str | None = None
    reserved: int = 0  # bytes held for an in-flight fetch
    last_use: float = 0.0
    reason: str = ""
    error: Exception | None = None
    tracker: FetchTracker | None = None
    done: asyncio.Future[None] | None = None  # resolved when a fetch ends, either way
    priority: int = 0
    deadline: float | None = None

    @property
    def size(self) -> int:
        return self.meta.size if self.meta else 0


@dataclass
class Index:
    """Entries by id, plus pins by canonical URI (pins may precede the entry)."""

    capacity: int
    entries: dict[str, Entry] = field(default_factory=dict)
    pins: dict[str, set[str]] = field(default_factory=dict)

    def cached_bytes(self) -> int:
        return sum(e.size for e in self.entries.values() if e.state is EntryState.CACHED)

    def reserved_bytes(self) -> int:
        return sum(e.reserved for e in self.entries.values() if e.state is EntryState.FETCHING)

    def used_bytes(self) -> int:
        return self.cached_bytes() + self.reserved_bytes()

    def is_pinned(self, uri: str) -> bool:
        return bool(self.pins.get(uri))

    def victims_for(self, entry: Entry, need: int) -> list[Entry]:
        """Least-recently-used unpinned cached entries to drop so `need` more bytes fit.

        Raises ResourceExhausted, naming needed vs obtainable bytes, when even
        dropping every unpinned entry would not make room (no thrashing).
        """
        free = self.capacity - self.used_bytes()
        if need <= free:
            return []
        candidates = sorted(
            (e for e in self.entries.values()
             if e.state is EntryState.CACHED and e is not entry and not self.is_pinned(e.uri)),
            key=lambda e: e.last_use,
        )
        obtainable = free + sum(e.size for e in candidates)
        if need > obtainable:
            pinned = sum(e.size for e in self.entries.values()
                         if e.state is EntryState.CACHED and self.is_pinned(e.uri))
            raise ResourceExhausted(
                f"{entry.uri} needs {need} bytes but at most {max(obtainable, 0)} of the cache's "
                f"{self.capacity} bytes can be freed ({pinned} bytes pinned by pending steps, "
                f"{self.reserved_bytes()} bytes reserved by fetches in flight)")
        out: list[Entry] = []
        for e in candidates:
            if free >= need:
                break
            out.append(e)
            free += e.size
        return out

    def status(self, e: Entry) -> EntryStatus:
        progress = None
        if e.tracker is not None and e.state is EntryState.FETCHING:
            t = e.tracker
            progress = Progress(t.done_bytes, t.total_bytes, t.objects_done, t.objects_total)
        return EntryStatus(
            uri=e.uri, entry_id=e.entry_id, state=e.state, path=e.path if e.state is EntryState.CACHED else None,
            size_bytes=e.size if e.meta else (e.tracker.total_bytes if e.tracker else 0),
            progress=progress, last_use=e.last_use, pin_owners=tuple(sorted(self.pins.get(e.uri, ()))),
            reason=e.reason, verified=e.meta.verified if e.meta else "")
