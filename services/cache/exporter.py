"""OpenTelemetry instruments of a node's cache: hits, misses, bytes held."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from opentelemetry import metrics
from opentelemetry.metrics import Observation

from gpufair.cache.node.cache import NodeCache
from gpufair.common.observability import on_loop


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
