"""Observed step durations in etcd, which the planner uses to predict step starts."""

from __future__ import annotations

import math

from gpufair.common.errors import InvalidArgument
from gpufair.common.etcd import EtcdState
from gpufair.common.keys import Keys

KEEP = 20  # the planner uses the median of the most recent runs


async def record_duration(state: EtcdState, keys: Keys, step_key: str, seconds: float) -> list[float]:
    """Append one observed duration of a step (by its history key); returns what is stored."""
    if not (math.isfinite(seconds) and 0 <= seconds <= 30 * 86_400):
        raise InvalidArgument(f"duration {seconds!r} must be between 0 and 30 days, in seconds")
    try:
        key = keys.step_durations(step_key)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    stored = await state.get(key)
    past = [float(s) for s in (stored.value.get("seconds", []) if stored else []) if isinstance(s, (int, float))]
    values = (past + [float(seconds)])[-KEEP:]
    await state.put(key, {"seconds": values})
    return values
