"""Reconnect delays for the client's background threads."""

from __future__ import annotations

import random
import threading


class Backoff:
    """Exponential backoff with jitter, capped; `wait()` returns early when stopped."""

    def __init__(self, stop: threading.Event, first_s: float = 0.1, cap_s: float = 5.0) -> None:
        self._stop, self._first, self._cap = stop, first_s, cap_s
        self._next = first_s

    def reset(self) -> None:
        self._next = self._first

    def wait(self) -> bool:
        """Sleep the next delay; False if the owner is stopping."""
        delay = self._next * random.uniform(0.5, 1.0)
        self._next = min(self._next * 2, self._cap)
        return not self._stop.wait(delay)
