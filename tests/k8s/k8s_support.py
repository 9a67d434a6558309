"""Recorded Kubernetes objects and a small in-memory cluster for the admission tests.

`tests/fixtures/k8s/{nodes,pods}.json` are `kubectl get -o json` lists. The
scenarios are copies of those objects with one thing changed; patches are
applied with `jsonpatch` (an independent RFC 6902 implementation) and, in
`FakeCluster`, with the API server's rules that matter here: the patch is
atomic, its `test` ops guard it, and only scheduling gates may be removed
and node affinity narrowed on a gated pod.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsonpatch

from gpufair.scheduler.k8s.admit import Context, Decision, decide
from gpufair.scheduler.k8s.objects import GATE, JOB_LABEL

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "k8s"
NOW = 1741080000.0  # 2025-03-04T09:20:00Z, after every pod in the fixtures was created
NAMESPACE = "gpufair"
Obj = dict[str, Any]


def recorded(kind: str) -> list[Obj]:
    """The items of `nodes.json` or `pods.json` (fresh copies)."""
    return json.loads((FIXTURES / f"{kind}.json").read_text(encoding="utf-8"))["items"]


def by_name(objs: Sequence[Obj], name: str) -> Obj:
    (hit,) = [o for o in objs if o["metadata"]["name"] == name]
    return hit


def gated_pod(job: str, index: int, *, gpus: int = 1, size: int = 2, created: str = "2025-03-04T09:15:02Z",
              annotations: dict[str, str] | None = None) -> Obj:
    """A copy of the recorded gated pod resnet-a-0, made a rank of `job`."""
    pod = copy.deepcopy(by_name(recorded("pods"), "resnet-a-0-x7k2p"))
    meta = pod["metadata"]
    meta["name"] = f"{job}-{index}-abcde"
    meta["uid"] = f"uid-{job}-{index}"
    meta["creationTimestamp"] = created
    meta["labels"].update({JOB_LABEL: job, "job-name": job, "batch.kubernetes.io/job-name": job,
                           "batch.kubernetes.io/job-completion-index": str(index)})
    meta["ownerReferences"][0].update(name=job, uid=f"job-uid-{job}")
    meta["annotations"] = {"gpufair.io/pods": str(size), **(annotations or {})}
    set_gpus(pod, gpus)
    return pod


def set_gpus(pod: Obj, gpus: int) -> Obj:
    res = pod["spec"]["containers"][0]["resources"]
    for part in ("limits", "requests"):
        res[part]["nvidia.com/gpu"] = str(gpus)
    return pod


def ctx(**kw: Any) -> Context:
    return Context(**{"now": NOW, "namespace": NAMESPACE, **kw})


def run(nodes: Sequence[Obj], pods: Sequence[Obj], **kw: Any) -> Decision:
    return decide(nodes, pods, ctx(**kw))


def patched(pod: Obj, ops: Sequence[dict[str, Any]]) -> Obj:
    """`pod` after the JSON Patch (jsonpatch raises when a `test` op fails)."""
    return jsonpatch.apply_patch(pod, list(ops))


def gates(pod: Obj) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


class FakeCluster:
    """Nodes and Pods behind `ClusterApi`, patched the way the API server does, with a
    stand-in default scheduler (`bind`) that binds ungated pods pinned to a node."""

    def __init__(self, nodes: list[Obj], pods: list[Obj]) -> None:
        self.nodes, self.pods = nodes, pods
        self.calls: list[tuple[str, ...]] = []
        self._rv = 950000

    def list_nodes(self) -> list[Obj]:
        self.calls.append(("list_nodes",))
        return copy.deepcopy(self.nodes)

    def list_pods(self) -> list[Obj]:
        self.calls.append(("list_pods",))
        return copy.deepcopy([p for p in self.pods if p["status"]["phase"] not in ("Succeeded", "Failed")])

    def patch_pod(self, namespace: str, name: str, ops: Sequence[dict[str, Any]]) -> str:
        self.calls.append(("patch_pod", namespace, name))
        pod = next(p for p in self.pods if (p["metadata"]["namespace"], p["metadata"]["name"]) == (namespace, name))
        try:
            new = patched(pod, ops)
        except (jsonpatch.JsonPatchTestFailed, jsonpatch.JsonPatchConflict) as exc:
            return f"refused (422): {exc}"
        check_gated_pod_update(pod, new)
        self._rv += 1
        new["metadata"]["resourceVersion"] = str(self._rv)
        pod.clear()
        pod.update(new)
        return ""

    def bind(self) -> None:
        """What the default scheduler does next: bind every ungated pod pinned to a node."""
        for p in self.pods:
            terms = (p["spec"].get("affinity", {}).get("nodeAffinity", {})
                     .get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", []))
            names = {v for t in terms for f in t.get("matchFields", []) if f["key"] == "metadata.name"
                     for v in f["values"]}
            if not gates(p) and not p["spec"].get("nodeName") and len(names) == 1:
                p["spec"]["nodeName"] = names.pop()
                p["status"]["phase"] = "Running"


def check_gated_pod_update(old: Obj, new: Obj) -> None:
    """The API server's rules for updating a pending, gated pod (KEP-3521, KEP-3838):
    gates may only be removed, node affinity only narrowed, nothing else in spec changes."""
    before, after = old["spec"], new["spec"]
    assert set(gates(new)) <= set(gates(old)), "a scheduling gate was added"
    rest = lambda spec: {k: v for k, v in spec.items() if k not in ("schedulingGates", "affinity")}  # noqa: E731
    assert rest(before) == rest(after), "spec changed beyond gates and affinity"
    key = "requiredDuringSchedulingIgnoredDuringExecution"
    old_terms = before.get("affinity", {}).get("nodeAffinity", {}).get(key, {}).get("nodeSelectorTerms", [])
    new_terms = after.get("affinity", {}).get("nodeAffinity", {}).get(key, {}).get("nodeSelectorTerms", [])
    if old_terms:
        assert len(new_terms) == len(old_terms), "terms added or removed"
        for o, n in zip(old_terms, new_terms):
            for part in ("matchExpressions", "matchFields"):
                assert n.get(part, [])[:len(o.get(part, []))] == o.get(part, []), "a requirement was changed"
    other = {k: v for k, v in before.get("affinity", {}).items() if k != "nodeAffinity"}
    assert {k: v for k, v in after.get("affinity", {}).items() if k != "nodeAffinity"} == other
    assert GATE not in gates(new) or gates(new) == gates(old)
