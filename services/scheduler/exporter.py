"""OpenTelemetry instruments of a scheduler replica: slow-downs (leader) and splits (every replica)."""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from gpufair.scheduler.loop import DecisionLoop
from gpufair.scheduler.registry import JobRegistry


def register_instruments(registry: JobRegistry, loop: DecisionLoop, meter: metrics.Meter | None = None) -> None:
    meter = meter or metrics.get_meter("gpufair.scheduler")

    def slowdowns(_: CallbackOptions) -> Iterable[Observation]:
        return [Observation(e.slowdown, {"job": job}) for job, e in loop.latest.items() if e.slowdown > 0]

    def splits(_: CallbackOptions) -> Iterable[Observation]:
        out = []
        for view in registry.views():
            if view.split:
                out.extend(Observation(b, {"job": view.spec.job_id, "rank": str(r)}) for r, b in enumerate(view.split.batch_sizes))
        return out

    meter.create_observable_gauge("gpufair_job_slowdown", [slowdowns], description="estimated slow-down at the latest decision round")
    meter.create_observable_gauge("gpufair_job_split_batch", [splits], description="local batch size per rank in the split in force")
