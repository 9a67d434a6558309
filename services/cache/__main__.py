"""`python -m gpufair.cache`: run this node's cache service."""

from __future__ import annotations

import asyncio
import sys

from gpufair.cache.app import build_node
from gpufair.cache.exporter import register_instruments
from gpufair.cache.node.config import NodeCacheConfig
from gpufair.common.auth import auth_interceptors
from gpufair.common.config import CommonConfig
from gpufair.common.runner import run_service


async def _build(config: CommonConfig):
    node = await build_node(config, NodeCacheConfig.from_env())
    register_instruments(node.cache, node.servicer.counters, node.cache.config.node, asyncio.get_running_loop())
    return node.deps(auth_interceptors(config)), node.close


def main() -> int:
    return run_service("cache", "0.0.0.0:50053", _build)


if __name__ == "__main__":
    sys.exit(main())
