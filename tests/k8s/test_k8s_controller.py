"""The leader's admission loop against an in-memory cluster: a round admits and
the default scheduler's binding leaves the next round nothing to do; standby
replicas never call the API; a pod changed under a round, an API outage or a
lost leadership cost a round at most; profiles and cache contents outlive
an etcd outage; and the caches' records say which nodes hold a dataset."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gpufair.cache.node.publisher import entry_record
from gpufair.cache.node.status import EntryState, EntryStatus
from gpufair.common.errors import Unavailable
from gpufair.common.keys import Keys
from gpufair.common.memstate import MemoryState
from gpufair.scheduler.app import build_replica
from gpufair.common.config import CommonConfig
from gpufair.scheduler.k8s.controller import AdmissionController, K8sSettings, cached_datasets
from gpufair.scheduler.sources import PolicySettings
from k8s_support import NOW, FakeCluster, by_name, gates, recorded

RESNET = ("resnet-a-0-x7k2p", "resnet-a-1-q9w4z")
DATASET = "s3://datasets/imagenet/train/"


class Leader:
    def __init__(self, leads: bool = True) -> None:
        self.is_leader = leads


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster(recorded("nodes"), recorded("pods"))


def controller(api, leadership=None, inputs=None, period=None) -> AdmissionController:
    async def every_10ms() -> float:
        return 0.01
    return AdmissionController(api, leadership or Leader(), "gpufair", period or every_10ms, inputs, clock=lambda: NOW)


async def test_a_round_admits_and_once_bound_the_next_round_has_nothing_to_do(cluster) -> None:
    ctl = controller(cluster)
    first = await ctl.reconcile()
    assert [a.job for a in first.admitted] == ["resnet-a"]
    for name in RESNET:
        assert gates(by_name(cluster.pods, name)) == []
    cluster.bind()
    assert {by_name(cluster.pods, n)["spec"]["nodeName"] for n in RESNET} == {"gpu-a"}
    second = await ctl.reconcile()
    assert second.free["gpu-a"] == 0 and not second.patches and ctl.last is second


async def test_a_standby_replica_never_calls_the_api(cluster) -> None:
    rounds = asyncio.Event()
    seen = []

    async def period() -> float:
        seen.append(1)
        if len(seen) >= 5:
            rounds.set()
        return 0.001

    ctl = controller(cluster, Leader(False), period=period)
    ctl.start()
    await asyncio.wait_for(rounds.wait(), 10)
    await ctl.stop()
    assert cluster.calls == []


class Concurrent(FakeCluster):
    """Another writer updates the first gated pod right after the round lists pods."""

    def list_pods(self):
        pods = super().list_pods()
        if not getattr(self, "raced", False):
            self.raced = True
            by_name(self.pods, RESNET[0])["metadata"]["resourceVersion"] = "913555"
        return pods


async def test_a_pod_changed_under_the_round_is_refused_and_admitted_next_round(caplog) -> None:
    cluster = Concurrent(recorded("nodes"), recorded("pods"))
    ctl = controller(cluster)
    with caplog.at_level(logging.INFO, logger="gpufair.scheduler.k8s.controller"):
        await ctl.reconcile()
    assert gates(by_name(cluster.pods, RESNET[0])) == ["gpufair.io/admission"]  # refused by its test op
    assert gates(by_name(cluster.pods, RESNET[1])) == []  # its sibling went through
    assert f"pod gpufair/{RESNET[0]} not patched, read again next round: refused (422)" in caplog.text
    d = await ctl.reconcile()
    assert [p.name for p in d.patches] == [RESNET[0]]
    assert gates(by_name(cluster.pods, RESNET[0])) == []


async def test_a_replica_that_loses_leadership_mid_round_stops_patching(cluster) -> None:
    leadership = Leader()

    class Demoting(FakeCluster):
        def patch_pod(self, namespace, name, ops):
            leadership.is_leader = False  # the lease ran out during the first patch
            return super().patch_pod(namespace, name, ops)

    demoting = Demoting(recorded("nodes"), recorded("pods"))
    await controller(demoting, leadership).reconcile()
    assert [c for c in demoting.calls if c[0] == "patch_pod"] == [("patch_pod", "gpufair", RESNET[0])]


async def test_the_loop_survives_an_api_outage_and_admits_once_it_is_back(cluster) -> None:
    class Flaky(FakeCluster):
        outages = 3

        def list_nodes(self):
            if self.outages:
                self.outages -= 1
                raise Unavailable("Kubernetes API list_node: HTTP 503: etcdserver: leader changed")
            return super().list_nodes()

    flaky = Flaky(recorded("nodes"), recorded("pods"))
    admitted = asyncio.Event()

    async def period() -> float:
        if flaky.outages == 0 and not gates(by_name(flaky.pods, RESNET[1])):
            admitted.set()
        return 0.001

    ctl = controller(flaky, period=period)
    ctl.start()
    await asyncio.wait_for(admitted.wait(), 10)
    await ctl.stop()
    assert [c for c in flaky.calls if c[0] == "list_pods"]


async def test_profiles_and_cache_contents_outlive_an_etcd_outage() -> None:
    answers: list[object] = [({}, {DATASET: frozenset({"gpu-b"})}), Unavailable("etcd down")]

    async def inputs():
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    first = FakeCluster(recorded("nodes"), recorded("pods"))
    ctl = controller(first, inputs=inputs)
    assert set((await ctl.reconcile()).admitted[0].nodes.values()) == {"gpu-b"}  # the cached node
    ctl._api = FakeCluster(recorded("nodes"), recorded("pods"))  # the same gated job again, etcd now down
    assert set((await ctl.reconcile()).admitted[0].nodes.values()) == {"gpu-b"}


async def test_a_kept_reason_or_problem_is_logged_once(cluster, caplog) -> None:
    for name in RESNET:
        by_name(cluster.pods, name)["metadata"]["annotations"]["gpufair.io/pods"] = "3"
    cluster.nodes.append({"kind": "Node"})
    ctl = controller(cluster)
    with caplog.at_level(logging.INFO, logger="gpufair.scheduler.k8s.controller"):
        for _ in range(3):
            await ctl.reconcile()
    assert caplog.text.count("job resnet-a stays gated: waiting for its pods: 2 of 3 exist") == 1
    assert caplog.text.count("skipped: a node without metadata.name") == 1


async def test_cached_datasets_reads_the_caches_records() -> None:
    state, keys = MemoryState(), Keys("/t")
    for node, uri, st in [("gpu-a", DATASET, EntryState.CACHED), ("gpu-b", DATASET, EntryState.CACHED),
                          ("gpu-b", "s3://datasets/coco/", EntryState.FETCHING)]:
        status = EntryStatus(uri=uri, entry_id=f"e{len(uri)}", state=st)
        await state.put(keys.cache_entry(node, status.entry_id), entry_record(status, node))
    assert await cached_datasets(state, keys) == {DATASET: frozenset({"gpu-a", "gpu-b"})}


def test_settings_come_from_the_environment() -> None:
    assert K8sSettings.from_env({"GPUFAIR_K8S": "1", "GPUFAIR_K8S_NAMESPACE": "ml"}) == K8sSettings(True, "ml")
    assert K8sSettings.from_env({}).enabled is False
    with pytest.raises(ValueError, match="GPUFAIR_K8S='kube': expected a boolean"):
        K8sSettings.from_env({"GPUFAIR_K8S": "kube"})


async def test_a_replica_builds_the_admission_loop_only_when_switched_on() -> None:
    config = CommonConfig(listen="127.0.0.1:0", etcd="127.0.0.1:1")
    made = []

    def factory():
        made.append(1)
        return FakeCluster([], [])

    off = await build_replica(config, PolicySettings(), k8s_api=factory)
    on = await build_replica(config, PolicySettings(), k8s=K8sSettings(True, "ml"), k8s_api=factory)
    try:
        assert off.admission is None and isinstance(on.admission, AdmissionController) and made == [1]
    finally:
        await off.close()
        await on.close()
