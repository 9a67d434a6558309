"""`python -m gpufair.metrics`: run the metrics service."""

from __future__ import annotations

import asyncio
import sys

from gpufair.common.config import CommonConfig
from gpufair.common.runner import run_service
from gpufair.common.auth import auth_interceptors
from gpufair.metrics.app import build_deps, expire_loop
from gpufair.metrics.exporter import register_instruments
from gpufair.metrics.store import MetricsStore


async def _build(config: CommonConfig):
    store = MetricsStore()
    register_instruments(store, asyncio.get_running_loop())
    housekeeping = asyncio.create_task(expire_loop(store))

    async def cleanup() -> None:
        housekeeping.cancel()

    return build_deps(store, auth_interceptors(config)), cleanup


def main() -> int:
    return run_service("metrics", "0.0.0.0:50051", _build)


if __name__ == "__main__":
    sys.exit(main())
