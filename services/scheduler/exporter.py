"""OpenTelemetry instruments of a scheduler replica: slow-downs (leader) and splits (every replica)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from gpufair.common.observability import on_loop
from gpufair.scheduler.loop import DecisionLoop
from gpufair.scheduler.registry import JobRegistry


def register_instruments(registry: JobRegistry, decisions: DecisionLoop, loop: asyncio.AbstractEventLoop,
                         meter: metrics.Meter | None = None) -> None:
    """Gauges read on the service's event loop (`on_loop`), where the state changes."""
    meter = meter or metrics.get_meter("gpufair.scheduler")

    def slowdowns(_: CallbackOptions) -> Iterable[Observation]:
        latest = on_loop(loop, lambda: dict(decisions.latest))
        return [Observation(e.slowdown, {"job": job}) for job, e in latest.items() if e.slowdown > 0]

    def splits(_: CallbackOptions) -> Iterable[Observation]:
        out = []
        for view in on_loop(loop, registry.views):
            if view.split:
                out.extend(Observation(b, {"job": view.spec.job_id, "rank": str(r)}) for r, b in enumerate(view.split.batch_sizes))
        return out

    meter.create_observable_gauge("gpufair_job_slowdown", [slowdowns], description="estimated slow-down at the latest decision round")
    meter.create_observable_gauge("gpufair_job_split_batch", [splits], description="local batch size per rank in the split in force")
