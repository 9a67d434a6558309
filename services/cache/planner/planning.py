"""The prefetch plan: predicted step starts and when to pull each dataset."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpufair.cache.planner.model import Dataset, Pipeline, Step
from gpufair.cache.planner.schedule import (
    DEFAULT_STEP_SECONDS, Transfer, earliest_starts, edf, latest_starts, step_duration,
)
from gpufair.common.errors import InvalidArgument


@dataclass(frozen=True)
class StepPlan:
    """A step with its predicted timing."""

    step: Step
    start_s: float
    duration_s: float
    duration_source: str
    slack_s: float
    conditional: bool

    @property
    def critical(self) -> bool:
        return self.slack_s <= 1e-9


@dataclass(frozen=True)
class DatasetPlan:
    """A dataset with its deadline and its slot on the link (when fetchable)."""

    dataset: Dataset
    size_bytes: int | None
    deadline_s: float | None
    transfer_s: float | None
    prefetch_start_s: float | None
    prefetch_finish_s: float | None
    latest_start_s: float | None
    status: str  # scheduled | late | unknown-size | not-fetchable | unused


@dataclass(frozen=True)
class Plan:
    """Everything `gpufair plan` shows and the cache service stores in etcd."""

    pipeline: Pipeline
    now: float
    bandwidth_bytes_per_s: float | None
    makespan_s: float
    steps: tuple[StepPlan, ...]
    datasets: tuple[DatasetPlan, ...]

    def step(self, name: str) -> StepPlan:
        return next(s for s in self.steps if s.step.name == name)

    def dataset(self, uri: str) -> DatasetPlan:
        return next(d for d in self.datasets if d.dataset.uri == uri)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; the keys format/steps/datasets/unresolved are stable."""
        p = self.pipeline
        return {
            "format": p.format, "name": p.name, "source": p.source, "now": self.now,
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s, "makespan_s": self.makespan_s,
            "parameters": {k: v for k, v in p.parameters},
            "steps": [_step_json(s) for s in self.steps],
            "datasets": [_dataset_json(d) for d in self.datasets],
            "unresolved": [u.to_json() for u in p.unresolved],
        }


def _step_json(s: StepPlan) -> dict[str, Any]:
    st = s.step
    return {
        "name": st.name, "kind": st.kind, "template": st.template, "depends_on": list(st.depends_on),
        "datasets": list(st.datasets), "gpus": st.gpus, "accelerator": st.accelerator,
        "node_hints": list(st.node_hints), "condition": st.condition, "conditional": s.conditional,
        "loop": st.loop, "predicted_start_s": s.start_s, "duration_s": s.duration_s,
        "duration_source": s.duration_source, "slack_s": s.slack_s, "critical": s.critical,
    }


def _dataset_json(d: DatasetPlan) -> dict[str, Any]:
    ds = d.dataset
    return {
        "uri": ds.uri, "scheme": ds.scheme, "fetchable": ds.fetchable, "reason": ds.reason,
        "consumers": list(ds.consumers), "origins": list(ds.origins), "endpoint": ds.endpoint,
        "size_bytes": d.size_bytes, "deadline_s": d.deadline_s, "transfer_s": d.transfer_s,
        "prefetch_start_s": d.prefetch_start_s, "prefetch_finish_s": d.prefetch_finish_s,
        "latest_start_s": d.latest_start_s, "status": d.status,
    }


def _check(sizes: Mapping[str, object], bandwidth: float | None, now: float) -> None:
    if bandwidth is not None and (isinstance(bandwidth, bool) or not isinstance(bandwidth, (int, float))
                                  or not math.isfinite(bandwidth) or bandwidth <= 0):
        raise InvalidArgument(f"bandwidth must be a positive number of bytes/s, got {bandwidth!r}")
    if isinstance(now, bool) or not isinstance(now, (int, float)) or not math.isfinite(now):
        raise InvalidArgument(f"now must be a finite number of seconds, got {now!r}")
    for uri, size in sizes.items():
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InvalidArgument(f"sizes[{uri!r}]: expected a byte count >= 0, got {size!r}")


def _conditional(step: Step, by_name: dict[str, Step]) -> bool:
    seen = 0
    node: Step | None = step
    while node is not None and seen < 64:
        if node.condition:
            return True
        node = by_name.get(node.parent) if node.parent else None
        seen += 1
    return False


def plan(
    pipeline: Pipeline,
    *,
    durations: Mapping[str, object] | None = None,
    sizes: Mapping[str, int] | None = None,
    bandwidth_bytes_per_s: float | None = None,
    now: float = 0.0,
    default_durations: Mapping[str, float] = DEFAULT_STEP_SECONDS,
) -> Plan:
    """Predict step starts (critical path) and schedule prefetches (EDF).

    `durations` maps a step's history key, name or template to past run
    times in seconds (the median is used); steps without history take
    `default_durations` by kind. Each fetchable dataset must arrive before
    its first consumer starts; with a size and a bandwidth its transfer time
    is known, otherwise its status is 'unknown-size'.
    """
    sizes = dict(sizes or {})
    _check(sizes, bandwidth_bytes_per_s, now)
    history = durations or {}
    timing = {s.name: step_duration(s, pipeline.name, history, default_durations) for s in pipeline.steps}
    seconds = {k: v[0] for k, v in timing.items()}
    start = earliest_starts(pipeline.steps, seconds, now)
    end = max((start[k] + seconds[k] for k in start), default=now)
    latest = latest_starts(pipeline.steps, seconds, end)
    by_name = {s.name: s for s in pipeline.steps}
    steps = tuple(
        StepPlan(s, start[s.name], seconds[s.name], timing[s.name][1], latest[s.name] - start[s.name],
                 _conditional(s, by_name))
        for s in pipeline.steps
    )
    datasets = _datasets(pipeline, start, sizes, bandwidth_bytes_per_s, now)
    return Plan(pipeline, now, bandwidth_bytes_per_s, end - now, steps, datasets)


def _datasets(pipeline: Pipeline, start: dict[str, float], sizes: dict[str, int],
              bandwidth: float | None, now: float) -> tuple[DatasetPlan, ...]:
    transfers = []
    for ds in pipeline.datasets:
        if ds.fetchable and ds.consumers:
            size = sizes.get(ds.uri)
            secs = size / bandwidth if size is not None and bandwidth else None
            transfers.append(Transfer(ds.uri, min(start[c] for c in ds.consumers), secs))
    slots = edf(transfers, now)
    deadlines = {t.key: (t.deadline, t.seconds) for t in transfers}
    out = []
    for ds in pipeline.datasets:
        size = sizes.get(ds.uri)
        if ds.uri not in slots:
            deadline = min((start[c] for c in ds.consumers), default=None)
            status = "not-fetchable" if not ds.fetchable else "unused"
            out.append(DatasetPlan(ds, size, deadline, None, None, None, None, status))
            continue
        slot = slots[ds.uri]
        deadline, secs = deadlines[ds.uri]
        status = "unknown-size" if slot.on_time is None else "scheduled" if slot.on_time else "late"
        out.append(DatasetPlan(ds, size, deadline, secs, slot.start, slot.finish, slot.latest_start, status))
    order = {"late": 0, "scheduled": 1, "unknown-size": 2, "not-fetchable": 3, "unused": 4}
    out.sort(key=lambda d: (order[d.status] > 2, d.deadline_s if d.deadline_s is not None else math.inf,
                            d.dataset.uri))
    return tuple(out)
