"""OpenTelemetry instruments of a scheduler replica: slow-downs, splits and paced shares, the
queue and admission waits, decision rounds, re-splits and leadership."""

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

    admission_waits = meter.create_histogram("gpufair_admission_wait_seconds", unit="s",
                                             description="how long each submission waited to be placed (leader)",
                                             explicit_bucket_boundaries_advisory=SECONDS_BUCKETS)

    def on_round(result: RoundResult) -> None:
        attrs = {"policy": result.record.policy}
        rounds.add(1, attrs)
        resplits.add(result.written, attrs)
        durations.record(result.record.duration_s, attrs)
        for wait in result.admitted_waits:
            admission_waits.record(wait, attrs)

    decisions.round_listeners.append(on_round)
    if election is not None:
        meter.create_observable_gauge("gpufair_scheduler_leader", [lambda _: [Observation(1 if election.is_leader else 0)]],
                                      description="1 while this replica leads (runs the decision rounds), else 0")

    def leading() -> bool:
        # Every replica has the figures; one series per job is enough (the leader decides on them).
        return election is None or election.is_leader

    def slowdowns(_: CallbackOptions) -> Iterable[Observation]:
        if not leading():
            return []
        latest = on_loop(loop, lambda: dict(decisions.latest))
        return [Observation(e.slowdown, {"job": job}) for job, e in latest.items() if e.slowdown > 0]

    def splits(_: CallbackOptions) -> Iterable[Observation]:
        out = []
        for view in on_loop(loop, registry.views):
            if view.split:
                out.extend(Observation(b, {"job": view.spec.job_id, "rank": str(r)}) for r, b in enumerate(view.split.batch_sizes))
        return out

    def queue_length(_: CallbackOptions) -> Iterable[Observation]:
        if not leading():
            return []
        queue = on_loop(loop, lambda: list(decisions.last_queue.values()))
        return [Observation(sum(e.submitted == submitted for e in queue), {"waiting": kind})
                for kind, submitted in (("submitted", True), ("held", False))]

    def queue_waits(_: CallbackOptions) -> Iterable[Observation]:
        if not leading():
            return []
        queue = on_loop(loop, lambda: list(decisions.last_queue.values()))
        return [Observation(e.waited_s, {"job": e.job}) for e in queue]

    def shares(_: CallbackOptions) -> Iterable[Observation]:
        out = []
        for view in on_loop(loop, registry.views):
            if view.active and view.split and view.split.shares:
                out.extend(Observation(x, {"job": view.spec.job_id, "rank": str(r)}) for r, x in enumerate(view.split.shares))
        return out

    meter.create_observable_gauge("gpufair_job_slowdown", [slowdowns], description="estimated slow-down at the latest decision round")
    meter.create_observable_gauge("gpufair_queue_length", [queue_length],
                                  description="jobs waiting for GPU time after the latest round: submitted (no GPUs yet) "
                                              "or held on their GPUs (leader)")
    meter.create_observable_gauge("gpufair_queue_wait_seconds", [queue_waits], unit="s",
                                  description="how long each waiting job has waited so far (leader)")
    meter.create_observable_gauge("gpufair_job_paced_share", [shares],
                                  description="per rank, the share of its GPU's time a paced job is given (0: held)")
    meter.create_observable_gauge("gpufair_job_split_batch", [splits], description="local batch size per rank in the split in force")
