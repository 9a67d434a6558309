"""The JSON Patches (RFC 6902) gpufair sends for a pod (pure).

Admitting a pod pins it to its node and removes gpufair's gate, and only
that gate, in one patch. Kubernetes allows exactly these changes on a gated
pod (1.27+): node affinity may only be narrowed, so an existing required
term gets the node requirement ANDed to it and nothing of the author's is
replaced; gates may only be removed. Every patch first tests the pod's
resourceVersion, and the gate's index, so a pod changed since it was read
is refused by the API server rather than patched blind; the next round
reads it again.
"""

from __future__ import annotations

from typing import Any

from gpufair.scheduler.k8s.objects import GATE, REASON_ANNOTATION, PodView

Op = dict[str, Any]
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
#: Longest reason written to the pod (annotations are small by convention).
MAX_REASON = 500


def pointer(*parts: str | int) -> str:
    """A JSON Pointer from path segments (`/` and `~` escaped)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _guard(pod: PodView) -> list[Op]:
    return [{"op": "test", "path": "/metadata/resourceVersion", "value": pod.resource_version}] \
        if pod.resource_version else []


def node_requirement(node: str) -> Op:
    """The requirement that pins a pod to `node` (as DaemonSet pods are pinned)."""
    return {"key": "metadata.name", "operator": "In", "values": [node]}


def pin_ops(affinity: dict[str, Any], node: str) -> list[Op]:
    """Ops that narrow `spec.affinity` (as read) to `node` (module docstring)."""
    req = node_requirement(node)
    selector = {"nodeSelectorTerms": [{"matchFields": [req]}]}
    node_affinity = affinity.get("nodeAffinity") or {}
    if not affinity:
        return [{"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {_REQUIRED: selector}}}]
    if not node_affinity:
        return [{"op": "add", "path": pointer("spec", "affinity", "nodeAffinity"), "value": {_REQUIRED: selector}}]
    required = node_affinity.get(_REQUIRED) or {}
    base = ("spec", "affinity", "nodeAffinity", _REQUIRED)
    if not required:
        return [{"op": "add", "path": pointer(*base), "value": selector}]
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return [{"op": "add", "path": pointer(*base, "nodeSelectorTerms"), "value": selector["nodeSelectorTerms"]}]
    ops = []
    for i, term in enumerate(terms):
        if term.get("matchFields"):
            ops.append({"op": "add", "path": pointer(*base, "nodeSelectorTerms", i, "matchFields", "-"), "value": req})
        else:
            ops.append({"op": "add", "path": pointer(*base, "nodeSelectorTerms", i, "matchFields"), "value": [req]})
    return ops


def admit_ops(pod: PodView, node: str) -> list[Op]:
    """Pin `pod` to `node` ("" for a pod that holds no GPU: not pinned) and lift gpufair's gate."""
    i = pod.gates.index(GATE)
    ops = _guard(pod) + [{"op": "test", "path": pointer("spec", "schedulingGates", i), "value": {"name": GATE}},
                         {"op": "remove", "path": pointer("spec", "schedulingGates", i)}]
    if node:
        ops += pin_ops(dict(pod.affinity), node)
    if REASON_ANNOTATION in pod.annotations:
        ops.append({"op": "remove", "path": pointer("metadata", "annotations", REASON_ANNOTATION)})
    return ops


def reason_ops(pod: PodView, reason: str) -> list[Op]:
    """Ops that record on a gated pod why it waits; [] when it already says so."""
    reason = reason[:MAX_REASON]
    if pod.annotations.get(REASON_ANNOTATION) == reason:
        return []
    if not pod.annotations:  # no map yet (or an empty one): create it
        return _guard(pod) + [{"op": "add", "path": "/metadata/annotations", "value": {REASON_ANNOTATION: reason}}]
    return _guard(pod) + [{"op": "add", "path": pointer("metadata", "annotations", REASON_ANNOTATION),
                           "value": reason}]
