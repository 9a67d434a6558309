"""`python -m gpufair.scheduler`: run one scheduler replica (leader-elected)."""

from __future__ import annotations

import asyncio
import sys

from gpufair.common.auth import auth_interceptors
from gpufair.common.config import CommonConfig
from gpufair.common.runner import run_service
from gpufair.scheduler.app import (build_replica, default_policy, k8s_settings, life_settings,
                                   start_background)
from gpufair.scheduler.exporter import register_instruments


async def _build(config: CommonConfig):
    replica = await build_replica(config, default_policy(), life=life_settings(), k8s=k8s_settings())
    register_instruments(replica.registry, replica.loop, asyncio.get_running_loop(), election=replica.election)
    return start_background(replica, auth_interceptors(config)), replica.close


def main() -> int:
    return run_service("scheduler", "0.0.0.0:50052", _build)


if __name__ == "__main__":
    sys.exit(main())
