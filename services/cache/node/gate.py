"""Admission of dataset fetches: at most N at once, nearest deadline then highest priority first."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math


class PriorityGate:
    """An async semaphore whose waiters are served in (deadline, -priority, arrival) order."""

    def __init__(self, slots: int) -> None:
        self._free = slots
        self._heap: list[tuple[float, int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    async def acquire(self, priority: int = 0, deadline: float | None = None) -> None:
        if self._free > 0 and not self._heap:
            self._free -= 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (deadline if deadline is not None else math.inf, -priority, next(self._seq), fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # granted and cancelled in the same tick: pass the slot on
            raise

    def release(self) -> None:
        while self._heap:
            *_, fut = heapq.heappop(self._heap)
            if not fut.done():
                fut.set_result(None)
                return
        self._free += 1
