"""The leader's admission loop on Kubernetes (`GPUFAIR_K8S=1`).

Every round period (the scheduler's, `GPUFAIR_PERIOD_S` or the stored
policy) the leader lists Nodes and Pods, decides (`admit.decide`) and sends
the patches. It is level-triggered: each round starts from what the API
says now, so a missed round, a refused patch (the pod changed) or a new
leader needs no recovery; the next round reads again. Standby replicas do
nothing here. Kubernetes calls are blocking and run in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from gpufair.common import env
from gpufair.common.errors import Unavailable
from gpufair.common.keys import Keys
from gpufair.common.state import StateStore
from gpufair.common.tasks import stop_task
from gpufair.scheduler.k8s.admit import Context, Decision, decide
from gpufair.scheduler.k8s.objects import Obj
from gpufair.scheduler.k8s.patch import Op
from gpufair.scheduler.snapshot import Profiles

logger = logging.getLogger(__name__)

Cached = Mapping[str, frozenset[str]]  # canonical dataset URI -> nodes whose cache holds it


@dataclass(frozen=True)
class K8sSettings:
    """Whether the scheduler admits gated pods, and in which namespace."""

    enabled: bool = False
    namespace: str = "default"

    @classmethod
    def from_env(cls, e: Mapping[str, str] | None = None) -> K8sSettings:
        return cls(env.K8S.read(e), env.K8S_NAMESPACE.read(e))


class ClusterApi(Protocol):
    """The Kubernetes calls the loop makes (`api.KubeApi`; a fake in tests)."""

    def list_nodes(self) -> list[Obj]: ...

    def list_pods(self) -> list[Obj]: ...

    def patch_pod(self, namespace: str, name: str, ops: Sequence[Op]) -> str: ...


class Leadership(Protocol):
    @property
    def is_leader(self) -> bool: ...


class AdmissionController:
    """Runs `reconcile()` every period while this replica leads."""

    def __init__(self, api: ClusterApi, leadership: Leadership, namespace: str,
                 period_s: Callable[[], Awaitable[float]],
                 inputs: Callable[[], Awaitable[tuple[Profiles, Cached]]] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._api, self._leadership, self._namespace = api, leadership, namespace
        self._period_s, self._inputs, self._clock = period_s, inputs, clock
        self._task: asyncio.Task[None] | None = None
        self._said: dict[str, str] = {}  # what was last logged per job or problem, so a round logs changes only
        self._known: tuple[Profiles, Cached] = ({}, {})
        self.last: Decision | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="k8s-admission")

    async def stop(self) -> None:
        await stop_task(self._task)

    async def _run(self) -> None:
        while True:
            period = 5.0
            try:
                period = await self._period_s()
                if self._leadership.is_leader:
                    await self.reconcile()
            except asyncio.CancelledError:
                raise
            except Unavailable as exc:
                logger.warning("admission round skipped: %s", exc)
            except Exception:  # noqa: BLE001 - one bad round must not stop the loop
                logger.exception("admission round failed")
            await asyncio.sleep(period)

    async def _known_inputs(self) -> tuple[Profiles, Cached]:
        # Profiles and cache contents only refine the order and the node; without
        # etcd the round goes on with the last ones read.
        if self._inputs is not None:
            try:
                self._known = await self._inputs()
            except Unavailable as exc:
                logger.info("profiles or cache contents unavailable, using the last read: %s", exc)
        return self._known

    async def reconcile(self) -> Decision:
        """One round: read the cluster, decide, patch. Returns the decision."""
        nodes = await asyncio.to_thread(self._api.list_nodes)
        pods = await asyncio.to_thread(self._api.list_pods)
        profiles, cached = await self._known_inputs()
        decision = decide(nodes, pods, Context(self._clock(), self._namespace, profiles, cached))
        self._report(decision)
        for patch in decision.patches:
            if not self._leadership.is_leader:
                logger.info("lost leadership during an admission round: patches left to the new leader")
                break
            refused = await asyncio.to_thread(self._api.patch_pod, patch.namespace, patch.name, patch.ops)
            if refused:
                logger.info("pod %s/%s not patched, read again next round: %s", patch.namespace, patch.name,
                            refused)
        self.last = decision
        return decision

    def _report(self, d: Decision) -> None:
        said: dict[str, str] = {}
        for a in d.admitted:
            logger.info("admitted %s: %s", a.job, ", ".join(f"{p} -> {n or 'any node'}"
                                                          for p, n in sorted(a.nodes.items())))
        for w in d.waiting:
            key = f"job {w.job}" if w.job else f"pod {w.pods[0]}"
            said[key] = w.reason
            if self._said.get(key) != w.reason:
                logger.info("%s stays gated: %s", key, w.reason)
        for problem in d.problems:
            said[problem] = problem
            if problem not in self._said:
                logger.warning("%s", problem)
        self._said = said


async def cached_datasets(state: StateStore, keys: Keys) -> Cached:
    """Which nodes' caches hold each dataset, from the caches' records in etcd."""
    # The cache service owns its records' form; its reader is imported only when
    # the admission loop runs (it brings the cache's S3 client with it).
    from gpufair.cache.node.publisher import read_cluster_entries
    from gpufair.cache.node.status import EntryState

    held: dict[str, set[str]] = {}
    for node, entry in await read_cluster_entries(state, keys):
        if entry.state is EntryState.CACHED:
            held.setdefault(entry.uri, set()).add(node)
    return {uri: frozenset(nodes) for uri, nodes in held.items()}
