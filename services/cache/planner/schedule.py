"""Timing: step durations, critical-path start times, EDF prefetch on one link."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpufair.cache.planner.model import CONTAINER, DAG, EXTERNAL, IMPORTER, OTHER, RESOURCE, Step
from gpufair.common.errors import InvalidArgument

#: Seconds assumed for a step with no history. Containers do the work;
#: importers only register metadata and DAG nodes only order children.
DEFAULT_STEP_SECONDS: Mapping[str, float] = {
    CONTAINER: 60.0, RESOURCE: 60.0, EXTERNAL: 60.0, IMPORTER: 0.0, DAG: 0.0, OTHER: 0.0,
}


def _samples(key: str, raw: object) -> list[float]:
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        raw = [raw]
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)):
        raise InvalidArgument(f"durations[{key!r}]: expected a list of seconds, got {type(raw).__name__}")
    out = []
    for x in raw:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
            raise InvalidArgument(f"durations[{key!r}]: {x!r} is not a duration in seconds (finite, >= 0)")
        out.append(float(x))
    return out


def step_duration(step: Step, pipeline: str, history: Mapping[str, object],
                  defaults: Mapping[str, float] = DEFAULT_STEP_SECONDS) -> tuple[float, str]:
    """(seconds, 'history' or 'default'): the median of past runs when known.

    History is looked up by the step's etcd-safe history key, then its name,
    then its template (the same component in another pipeline).
    """
    if step.kind == DAG:
        return 0.0, "default"
    for key in (step.history_key(pipeline), step.name, step.template):
        if key in history:
            samples = _samples(key, history[key])
            if samples:
                return statistics.median(samples), "history"
    return defaults.get(step.kind, 0.0), "default"


def earliest_starts(steps: Sequence[Step], durations: Mapping[str, float], now: float) -> dict[str, float]:
    """Earliest start of each step; `steps` come in dependency order."""
    finish: dict[str, float] = {}
    start: dict[str, float] = {}
    for step in steps:
        start[step.name] = max((finish[d] for d in step.depends_on), default=now)
        finish[step.name] = start[step.name] + durations[step.name]
    return start


def latest_starts(steps: Sequence[Step], durations: Mapping[str, float], end: float) -> dict[str, float]:
    """Latest start of each step that keeps the pipeline's end at `end`."""
    latest: dict[str, float] = {}
    users: dict[str, list[str]] = {s.name: [] for s in steps}
    for step in steps:
        for dep in step.depends_on:
            users[dep].append(step.name)
    for step in reversed(steps):
        finish = min((latest[u] for u in users[step.name]), default=end)
        latest[step.name] = finish - durations[step.name]
    return latest


@dataclass(frozen=True)
class Transfer:
    """One prefetch on the shared link: due by `deadline`, taking `seconds`."""

    key: str
    deadline: float
    seconds: float | None


@dataclass(frozen=True)
class Slot:
    """When a transfer runs: as soon as possible, and at the latest."""

    start: float
    finish: float
    latest_start: float
    on_time: bool | None


def edf(transfers: Sequence[Transfer], now: float) -> dict[str, Slot]:
    """Earliest-deadline-first on one link (optimal for maximum lateness).

    Transfers run back to back from `now` in deadline order; `latest_start`
    is the just-in-time schedule packed backwards from the deadlines. An
    unknown duration counts as zero and its punctuality as unknown.
    """
    order = sorted(transfers, key=lambda t: (t.deadline, t.key))
    cursor = now
    asap: dict[str, tuple[float, float]] = {}
    for t in order:
        asap[t.key] = (cursor, cursor + (t.seconds or 0.0))
        cursor = asap[t.key][1]
    slots: dict[str, Slot] = {}
    ceiling = math.inf
    for t in reversed(order):
        finish = min(t.deadline, ceiling)
        latest = finish - (t.seconds or 0.0)
        ceiling = latest
        start, end = asap[t.key]
        on_time = None if t.seconds is None else end <= t.deadline + 1e-9
        slots[t.key] = Slot(start, end, latest, on_time)
    return slots
