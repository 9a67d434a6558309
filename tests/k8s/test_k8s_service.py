"""The scheduler process with `GPUFAIR_K8S=1`, a real etcd and the official
client talking HTTP to a stand-in API server: once leader it admits the
gated job through the API, with the declared calls and no others; without
an API to talk to it refuses to start, in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpufair.local.stack import start_service
from gpufair.scheduler.k8s.api import CALLS
from fake_apiserver import FakeApiServer
from k8s_support import FakeCluster, by_name, gates, recorded
from test_k8s_api import rbac_of

RESNET = ("resnet-a-0-x7k2p", "resnet-a-1-q9w4z")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUFAIR_", "KUBERNETES_", "KUBECONFIG"))}
    return {**env, "HOME": str(tmp_path), "GPUFAIR_LISTEN": "127.0.0.1:0", "GPUFAIR_K8S": "1",
            "GPUFAIR_K8S_NAMESPACE": "gpufair", "GPUFAIR_PERIOD_S": "0.2", "GPUFAIR_LEASE_TTL": "5",
            "GPUFAIR_METRICS_ADDR": "127.0.0.1:1", **extra}


def test_the_leader_admits_a_gated_job_through_the_kubernetes_api(etcd_endpoint: str, etcd_root: str,
                                                                   tmp_path: Path) -> None:
    cluster = FakeCluster(recorded("nodes"), recorded("pods"))
    with FakeApiServer(cluster) as api:
        env = _env(tmp_path, GPUFAIR_ETCD=etcd_endpoint, GPUFAIR_ETCD_ROOT=etcd_root,
                   KUBECONFIG=str(api.kubeconfig(tmp_path / "kubeconfig")))
        child, _ = start_service("gpufair.scheduler", env, tmp_path / "scheduler.log")
        try:
            admitted = api.wait_for(lambda: all(gates(by_name(cluster.pods, n)) == [] for n in RESNET), 60)
            assert admitted, child.log_tail()
        finally:
            child.stop()
    for name in RESNET:
        terms = by_name(cluster.pods, name)["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-a"]}]}]
    called = {rbac_of(method, api.url + path) for method, path, _, _ in api.requests}
    assert called == {(c.verb, c.resource, c.namespaced) for c in CALLS}
    assert {ct for m, _, _, ct in api.requests if m == "PATCH"} == {"application/json-patch+json"}
    assert any("continue" in q for m, p, q, _ in api.requests if p == "/api/v1/pods")  # paged (2 per page)


def test_without_a_kubernetes_api_the_scheduler_refuses_to_start(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "gpufair.scheduler"], env=_env(tmp_path), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("gpufair-scheduler: bad configuration: GPUFAIR_K8S is on but the Kubernetes API is "
                           "not configured: no service account (")
