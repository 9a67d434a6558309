"""OpenTelemetry instruments over the metrics store (scraped by Prometheus or sent over OTLP)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from gpufair.common.observability import on_loop
from gpufair.metrics.store import MetricsStore


def register_instruments(store: MetricsStore, loop: asyncio.AbstractEventLoop, meter: metrics.Meter | None = None) -> None:
    """Observable gauges read the store at collection time (no work per record), on the service's loop."""
    meter = meter or metrics.get_meter("gpufair.metrics")

    def per_job(attr: str):
        def callback(_: CallbackOptions) -> Iterable[Observation]:
            return [Observation(getattr(s, attr), {"job": s.job_id}) for s in on_loop(loop, store.jobs)]
        return callback

    def devices(_: CallbackOptions) -> Iterable[Observation]:
        return [Observation(d.utilization_percent, {"device": d.device_id, "node": d.node}) for d in on_loop(loop, store.devices)]

    meter.create_observable_gauge("gpufair_job_samples_per_second", [per_job("samples_per_s")], description="job throughput, short window")
    meter.create_observable_gauge("gpufair_job_progress_ratio", [per_job("progress")], description="fraction of total work done")
    meter.create_observable_gauge("gpufair_job_data_stall_ratio", [per_job("data_stall_fraction")], description="data wait over step time")
    meter.create_observable_gauge("gpufair_device_utilization_percent", [devices], description="device busy share")
    meter.create_observable_counter(
        "gpufair_telemetry_records", [lambda _: [Observation(store.records_total)]], description="records ingested"
    )
