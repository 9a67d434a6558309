"""Wiring of a scheduler replica: etcd state, registry, election, loop, streams, servicer."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import grpc

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from gpufair.common import env
from gpufair.common.channels import aio_channel, token_metadata
from gpufair.common.config import CommonConfig
from gpufair.common.etcd import EtcdState
from gpufair.common.keys import Keys
from gpufair.common.leader import LeaderElection
from gpufair.common.server import RunningServer, ServerDeps, ServiceBinding, create_server
from gpufair.common.tokens import JobTokens
from gpufair.scheduler.housekeeping import LifeSettings
from gpufair.scheduler.hub import CommandHub
from gpufair.scheduler.k8s.controller import AdmissionController, Cached, ClusterApi, K8sSettings, cached_datasets
from gpufair.scheduler.lifecycle import Retention
from gpufair.scheduler.loop import DecisionLoop
from gpufair.scheduler.profiles import ProfileStore
from gpufair.scheduler.registry import JobRegistry
from gpufair.scheduler.servicer import SchedulerServicer
from gpufair.scheduler.snapshot import Profiles
from gpufair.scheduler.sources import MetricsSource, PolicySettings, PolicyStore

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["SchedulerService"].full_name


@dataclass
class SchedulerReplica:
    """Everything one replica runs; `close()` stops it in reverse order."""

    state: EtcdState
    registry: JobRegistry
    election: LeaderElection
    loop: DecisionLoop
    hub: CommandHub
    metrics_channel: grpc.aio.Channel
    servicer: SchedulerServicer
    admission: AdmissionController | None = None  # Kubernetes admission, with GPUFAIR_K8S
    server: RunningServer | None = None

    async def close(self, grace: float = 1.0) -> None:
        if self.server:
            await self.server.stop(grace)
        if self.admission:
            await self.admission.stop()
        await self.loop.stop()
        await self.election.stop()
        await self.registry.stop()
        await self.metrics_channel.close()
        await self.state.close()


def default_policy(e: Mapping[str, str] | None = None) -> PolicySettings:
    """The policy from GPUFAIR_PRESET, GPUFAIR_POLICY, GPUFAIR_PERIOD_S and GPUFAIR_MIN_CHANGE
    (used until one is stored)."""
    base = PolicySettings(env.POLICY.read(e), env.PERIOD_S.read(e), env.MIN_CHANGE.read(e))
    preset = env.PRESET.read(e)
    if preset:  # the preset's levers; GPUFAIR_POLICY still names the split policy
        base = replace(PolicySettings.preset(preset, base), name=base.name)
    return base.validated()


def life_settings(e: Mapping[str, str] | None = None) -> LifeSettings:
    """When lost jobs end and how long ended records stay (GPUFAIR_JOB_LOST_S, GPUFAIR_JOB_RETENTION_S/_MAX)."""
    return LifeSettings(env.JOB_LOST_S.read(e), Retention(env.JOB_RETENTION_S.read(e), env.JOB_RETENTION_MAX.read(e)))


def k8s_settings(e: Mapping[str, str] | None = None) -> K8sSettings:
    """Kubernetes admission from GPUFAIR_K8S and GPUFAIR_K8S_NAMESPACE (off by default)."""
    return K8sSettings.from_env(e)


def _connect_k8s() -> ClusterApi:
    from gpufair.scheduler.k8s.api import connect  # the kubernetes client loads only when switched on

    return connect()


async def build_replica(config: CommonConfig, policy: PolicySettings, *, identity: str = "",
                        life: LifeSettings = LifeSettings(), k8s: K8sSettings = K8sSettings(),
                        k8s_api: Callable[[], ClusterApi] = _connect_k8s) -> SchedulerReplica:
    identity = identity or f"{config.node}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    kube = k8s_api() if k8s.enabled else None  # first: a bad Kubernetes configuration fails before anything opens
    keys = Keys(config.etcd_root)
    state = EtcdState(config.etcd, lease_ttl=config.lease_ttl, auth=config.etcd_auth)
    hub = CommandHub()
    registry = JobRegistry(state, keys, on_split=hub.publish, on_removed=hub.close)
    election = LeaderElection(state, keys.leader(), identity)
    policies = PolicyStore(state, keys, policy)
    tls = bool(config.tls.ca_file or config.tls.cert_file)
    channel = aio_channel(config.metrics_addr, tls_ca=config.tls.ca_file, tls=tls, token=config.auth.admin_token,
                          client_cert=config.tls.cert_file, client_key=config.tls.key_file)
    # On a plaintext channel the token travels as call metadata instead of channel credentials.
    metrics = MetricsSource(channel, metadata=() if tls else token_metadata(config.auth.admin_token))
    profiles = ProfileStore(state, keys)
    loop = DecisionLoop(state, keys, registry, election, policies, metrics.fetch, profiles.fits, life=life)
    servicer = SchedulerServicer(registry, hub, loop, policies, profiles, JobTokens(config.auth.job_token_secret), identity)
    admission = None
    if kube is not None:
        async def period_s() -> float:
            return (await policies.get()).period_s

        async def inputs() -> tuple[Profiles, Cached]:
            return await profiles.fits(), await cached_datasets(state, keys)

        admission = AdmissionController(kube, election, k8s.namespace, period_s, inputs)
    return SchedulerReplica(state, registry, election, loop, hub, channel, servicer, admission)


async def start_replica(config: CommonConfig, policy: PolicySettings, *, identity: str = "",
                        interceptors: Sequence[grpc.aio.ServerInterceptor] = (), life: LifeSettings = LifeSettings(),
                        k8s: K8sSettings = K8sSettings(),
                        k8s_api: Callable[[], ClusterApi] = _connect_k8s) -> SchedulerReplica:
    """Start serving at once (NOT_SERVING until etcd answers); background tasks retry etcd."""
    replica = await build_replica(config, policy, identity=identity, life=life, k8s=k8s, k8s_api=k8s_api)
    replica.server = await create_server(config, start_background(replica, interceptors))
    return replica


def start_background(replica: SchedulerReplica, interceptors: Sequence[grpc.aio.ServerInterceptor] = ()) -> ServerDeps:
    """Start the replica's background tasks and return what the server needs to serve it."""
    replica.registry.start_background()
    replica.election.start()
    replica.loop.start()
    if replica.admission:
        replica.admission.start()
    return ServerDeps(
        services=[ServiceBinding(SERVICE_NAME, lambda s: pb_grpc.add_SchedulerServiceServicer_to_server(replica.servicer, s))],
        readiness=lambda: _ready(replica),
        interceptors=interceptors,
    )


async def _ready(replica: SchedulerReplica) -> bool:
    return replica.registry.ready and await replica.state.ping()
