"""OpenTelemetry instruments of a scheduler replica: slow-downs and splits, decision rounds,
re-splits and leadership."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from gpufair.common.observability import SECONDS_BUCKETS, on_loop
from gpufair.scheduler.loop import DecisionLoop, Leadership, RoundResult
from gpufair.scheduler.registry import JobRegistry


def register_instruments(registry: JobRegistry, decisions: DecisionLoop, loop: asyncio.AbstractEventLoop,
                         meter: metrics.Meter | None = None, election: Leadership | None = None) -> None:
    """Gauges read on the service's event loop (`on_loop`), where the state changes; a histogram
    fed by each decision round."""
    meter = meter or metrics.get_meter("gpufair.scheduler")
    durations = meter.create_histogram("gpufair_decision_round_duration_seconds", unit="s",
                                       description="time the policy took in a decision round (leader)",
                                       explicit_bucket_boundaries_advisory=SECONDS_BUCKETS)
    resplits = meter.create_counter("gpufair_resplits", description="new split versions written by decision rounds (leader)")
    rounds = meter.create_counter("gpufair_decision_rounds", description="decision rounds run (leader)")

    def on_round(result: RoundResult) -> None:
        attrs = {"policy": result.record.policy}
        rounds.add(1, attrs)
        resplits.add(result.written, attrs)
        durations.record(result.record.duration_s, attrs)

    decisions.round_listeners.append(on_round)
    if election is not None:
        meter.create_observable_gauge("gpufair_scheduler_leader", [lambda _: [Observation(1 if election.is_leader else 0)]],
                                      description="1 while this replica leads (runs the decision rounds), else 0")

    def slowdowns(_: CallbackOptions) -> Iterable[Observation]:
        if election is not None and not election.is_leader:
            return []  # every replica has the figures; one series per job is enough (the leader decides on them)
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
