"""May a pod run on a node? The node-level rules Kubernetes' scheduler applies
that gpufair must respect when it pins a pod (pure).

gpufair narrows where a pod may go; it must not pin it to a node the default
scheduler would then refuse, or the pod would stay Pending there. So a node
is a candidate for a pod only when it is Ready and not cordoned, every
`NoSchedule`/`NoExecute` taint is tolerated, `nodeSelector` matches, and one
of the required node affinity terms matches (Kubernetes' semantics: terms
are ORed, a term's requirements ANDed, an empty term matches nothing). Pod
(anti-)affinity and topology spread are not modelled: the default scheduler
still enforces them on the pinned node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpufair.scheduler.k8s.objects import NodeView, PodView, Taint

_BLOCKING = frozenset({"NoSchedule", "NoExecute"})


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Taint) -> bool:
    """Whether some toleration covers `taint` (an empty key with Exists covers all)."""
    for t in tolerations:
        effect, key = t.get("effect") or "", t.get("key") or ""
        if effect and effect != taint.effect:
            continue
        if key and key != taint.key:
            continue
        operator = t.get("operator") or "Equal"
        if operator == "Exists" or (operator == "Equal" and (t.get("value") or "") == taint.value):
            return True
    return False


def _number(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _expression(req: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = req.get("key"), req.get("operator"), [str(v) for v in req.get("values") or ()]
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        mine, bound = _number(labels[key]), _number(values[0])
        if mine is None or bound is None:
            return False
        return mine > bound if op == "Gt" else mine < bound
    return False  # an operator the API server would have refused


def _field(req: Mapping[str, Any], node: NodeView) -> bool:
    values = [str(v) for v in req.get("values") or ()]
    if req.get("key") != "metadata.name":
        return False  # the only field Kubernetes supports here
    if req.get("operator") == "In":
        return node.name in values
    if req.get("operator") == "NotIn":
        return node.name not in values
    return False


def term_matches(term: Mapping[str, Any], node: NodeView) -> bool:
    """One node selector term: every requirement holds, and there is at least one."""
    exprs, fields = term.get("matchExpressions") or (), term.get("matchFields") or ()
    if not exprs and not fields:
        return False
    return all(_expression(r, node.labels) for r in exprs) and all(_field(r, node) for r in fields)


def unfit_reason(pod: PodView, node: NodeView) -> str:
    """Why `pod` may not run on `node`, or "" when it may (module docstring)."""
    if not node.ready:
        return "not Ready"
    if node.unschedulable:
        return "cordoned"
    for taint in node.taints:
        if taint.effect in _BLOCKING and not tolerates(pod.tolerations, taint):
            return f"taint {taint.key}={taint.value}:{taint.effect} not tolerated"
    if any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
        return "nodeSelector does not match"
    if pod.node_terms is not None and not any(term_matches(t, node) for t in pod.node_terms):
        return "required node affinity does not match"
    return ""


def fits(pod: PodView, node: NodeView) -> bool:
    """Whether `pod` may run on `node`."""
    return not unfit_reason(pod, node)
