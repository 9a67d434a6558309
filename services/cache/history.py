"""Observed step durations: the one owner of `steps/<step_key>/durations` in etcd.

`gpufair steps record` (through RecordStepDuration) adds to them; the pipeline
runner reads them so the planner predicts step starts from the median.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from gpufair.cache.planner.model import step_history_key
from gpufair.common.errors import InvalidArgument, Unavailable
from gpufair.common.keys import Keys
from gpufair.common.state import StateStore

KEEP = 20  # the planner uses the median of the most recent runs
MAX_SECONDS = 30 * 86_400


def _seconds(value: object) -> list[float]:
    items = value.get("seconds") if isinstance(value, dict) else None
    return [float(s) for s in items if isinstance(s, (int, float))] if isinstance(items, list) else []


class StepHistory:
    """Past durations of pipeline steps, by step key."""

    def __init__(self, state: StateStore, keys: Keys) -> None:
        self._state, self._keys = state, keys

    async def record(self, pipeline: str, step: str, seconds: float) -> tuple[str, list[float]]:
        """Append one observed duration; returns (step key, what is now stored, oldest first)."""
        if not pipeline or not step:
            raise InvalidArgument("pipeline and step are required")
        if not (math.isfinite(seconds) and 0 <= seconds <= MAX_SECONDS):
            raise InvalidArgument(f"duration {seconds!r} must be between 0 and 30 days, in seconds")
        step_key = step_history_key(pipeline, step)
        try:
            key = self._keys.step_durations(step_key)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        stored = await self._state.get(key)
        values = (_seconds(stored.value if stored else None) + [float(seconds)])[-KEEP:]
        await self._state.put(key, {"seconds": values})
        return step_key, values

    async def durations(self, step_keys: Iterable[str]) -> dict[str, list[float]]:
        """What is stored for each of `step_keys` (missing, unreadable or bad ones left out)."""
        out: dict[str, list[float]] = {}
        for step_key in step_keys:
            try:
                stored = await self._state.get(self._keys.step_durations(step_key))
            except (Unavailable, ValueError):
                continue
            if stored and _seconds(stored.value):
                out[step_key] = _seconds(stored.value)
        return out
