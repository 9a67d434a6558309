"""The shared `main()` of every service: config once, logging, telemetry, serve."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable

from gpufair.common.config import CommonConfig
from gpufair.common.errors import GpufairError
from gpufair.common.observability import setup_logging, setup_telemetry
from gpufair.common.server import ServerDeps, serve

logger = logging.getLogger(__name__)

class _BadConfig(Exception):
    """Building the service from its configuration failed: exit 2 with one line."""


Build = Callable[[CommonConfig], Awaitable[tuple[ServerDeps, Callable[[], Awaitable[None]]]]]


def run_service(name: str, default_listen: str, build: Build) -> int:
    """Run a service until SIGTERM; returns the process exit code."""
    try:
        config = CommonConfig.from_env(default_listen)
    except (ValueError, OSError) as exc:
        print(f"gpufair-{name}: bad configuration: {exc}", file=sys.stderr)
        return 2
    setup_logging(config.log_level)
    setup_telemetry(config, f"gpufair-{name}")

    async def main() -> None:
        try:
            deps, cleanup = await build(config)
        except (GpufairError, ValueError) as exc:  # e.g. GPUFAIR_POLICY=bogus, a non-numeric period
            raise _BadConfig(str(exc)) from None
        # Announce the bound port on stdout so a parent that asked for port 0 can read it.
        await serve(config, deps, on_started=lambda port: print(f"gpufair-{name} listening on port {port}", flush=True), cleanup=cleanup)

    try:
        asyncio.run(main())
    except _BadConfig as exc:
        print(f"gpufair-{name}: bad configuration: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        logger.error("gpufair-%s failed: %s", name, exc)
        return 1
    return 0
