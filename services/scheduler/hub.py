"""Fan-out of split changes to the open command streams of this replica."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from gpufair.scheduler.jobs import Split


class CommandHub:
    """Each stream gets a small queue; only the newest split matters, so a full queue drops the oldest."""

    def __init__(self, queue_size: int = 8) -> None:
        self._subs: dict[str, set[asyncio.Queue[Split | None]]] = defaultdict(set)
        self._size = queue_size

    def subscribe(self, job: str) -> asyncio.Queue[Split | None]:
        q: asyncio.Queue[Split | None] = asyncio.Queue(self._size)
        self._subs[job].add(q)
        return q

    def unsubscribe(self, job: str, q: asyncio.Queue[Split | None]) -> None:
        self._subs[job].discard(q)
        if not self._subs[job]:
            del self._subs[job]

    def publish(self, job: str, split: Split | None) -> None:
        for q in self._subs.get(job, ()):
            if q.full():
                q.get_nowait()
            q.put_nowait(split)

    def close(self, job: str) -> None:
        """The job is gone: end its streams (None tells a stream to finish)."""
        for q in self._subs.get(job, ()):
            if q.full():
                q.get_nowait()
            q.put_nowait(None)
