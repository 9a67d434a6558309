"""Wiring of a node's cache service: NodeCache + pipeline runner + servicer on the shared server."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from gpufair.api.cache.v1 import cache_service_pb2 as pb
from gpufair.api.cache.v1 import cache_service_pb2_grpc as pb_grpc
from gpufair.cache.node.cache import NodeCache
from gpufair.cache.node.config import NodeCacheConfig
from gpufair.cache.history import StepHistory
from gpufair.cache.node.publisher import EtcdPublisher, read_cluster_entries
from gpufair.cache.node.s3 import S3Source, make_client
from gpufair.common.uris import parse_dataset_uri
from gpufair.cache.pipelines import PipelineRunner
from gpufair.cache.servicer import CacheServicer
from gpufair.common.config import CommonConfig
from gpufair.common.errors import GpufairError, Unavailable
from gpufair.common.etcd import EtcdState
from gpufair.common.keys import Keys
from gpufair.common.server import RunningServer, ServerDeps, ServiceBinding, create_server

logger = logging.getLogger(__name__)
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["CacheService"].full_name


@dataclass
class CacheNode:
    cache: NodeCache
    runner: PipelineRunner
    state: EtcdState
    servicer: CacheServicer
    server: RunningServer | None = None

    async def close(self, grace: float = 1.0) -> None:
        if self.server:
            await self.server.stop(grace)
        await self.runner.close()
        await self.cache.close()
        await self.state.close()

    def deps(self, interceptors: Sequence[grpc.aio.ServerInterceptor] = ()) -> ServerDeps:
        return ServerDeps(services=[ServiceBinding(SERVICE_NAME, lambda s: pb_grpc.add_CacheServiceServicer_to_server(self.servicer, s))],
                          readiness=self.state.ping, interceptors=interceptors)


def _sizer(source: S3Source):
    async def size_of(uri: str) -> int | None:
        try:
            manifest = await asyncio.wait_for(asyncio.to_thread(source.manifest, parse_dataset_uri(uri)), 10)
            return manifest.total_bytes
        except (GpufairError, asyncio.TimeoutError):
            return None  # unknown size: the plan says so

    return size_of


async def build_node(common: CommonConfig, cfg: NodeCacheConfig) -> CacheNode:
    keys = Keys(common.etcd_root)
    state = EtcdState(common.etcd, lease_ttl=common.lease_ttl, auth=common.etcd_auth)
    s3 = make_client(cfg)
    cache = NodeCache(cfg, s3=s3, publisher=EtcdPublisher(state, cfg.node, keys))  # one etcd client per process
    await cache.start()
    try:
        # Liveness of this node's cache, bound to the process lease (gone when the process is).
        await state.put_live(keys.cache_member(cfg.node), {"node": cfg.node, "capacity_bytes": cfg.capacity_bytes, "addr": common.listen})
    except Unavailable:
        logger.warning("etcd unreachable at start: cache liveness key not written yet")
    runner = PipelineRunner(cache, state, keys, _sizer(S3Source(s3, cfg.s3_endpoint)))
    servicer = CacheServicer(cache, runner, cfg.node, StepHistory(state, keys), lambda: read_cluster_entries(state, keys))
    return CacheNode(cache, runner, state, servicer)


async def start_node(common: CommonConfig, cfg: NodeCacheConfig, interceptors: Sequence[grpc.aio.ServerInterceptor] = ()) -> CacheNode:
    node = await build_node(common, cfg)
    node.server = await create_server(common, node.deps(interceptors))
    return node
