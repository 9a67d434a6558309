"""OpenTelemetry instruments of a node's cache: hits, misses, bytes held, fetch time, evictions."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from opentelemetry import metrics
from opentelemetry.metrics import Observation

from gpufair.cache.node.cache import NodeCache
from gpufair.common.observability import SECONDS_BUCKETS, on_loop


@dataclass
class CacheCounters:
    """Resolve outcomes; a hit is a dataset already cached when a trainer asked for it."""

    hits: int = 0
    misses: int = 0
    by_state: dict[str, int] = field(default_factory=dict)


def register_instruments(cache: NodeCache, counters: CacheCounters, node: str, loop: asyncio.AbstractEventLoop,
                         meter: metrics.Meter | None = None) -> None:
    """Counters are plain ints (atomic reads); the byte gauge reads the index on the service's loop."""
    meter = meter or metrics.get_meter("gpufair.cache")
    attrs = {"node": node}
    meter.create_observable_counter("gpufair_cache_hits", [lambda _: [Observation(counters.hits, attrs)]], description="resolves served from the cache")
    meter.create_observable_counter("gpufair_cache_misses", [lambda _: [Observation(counters.misses, attrs)]], description="resolves that had to fetch")
    meter.create_observable_gauge("gpufair_cache_bytes", [lambda _: [Observation(on_loop(loop, cache.usage)[0], attrs)]], description="bytes held or reserved")
    fetch = meter.create_histogram("gpufair_cache_fetch_duration_seconds", unit="s",
                                   description="time to fetch a dataset into the cache, by outcome (cached, failed, cancelled)",
                                   explicit_bucket_boundaries_advisory=SECONDS_BUCKETS)
    cache.fetch_listeners.append(lambda seconds, outcome: fetch.record(seconds, {**attrs, "outcome": outcome}))
    meter.create_observable_counter(
        "gpufair_cache_evictions",
        [lambda _: [Observation(n, {**attrs, "reason": why}) for why, n in dict(cache.evictions).items()] or [Observation(0, attrs)]],
        description="datasets evicted, by reason (lru: to fit another, operator, capacity: over capacity at start)")
