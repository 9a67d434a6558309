"""Accelerator requests and node-placement hints (Kubernetes and KFP forms)."""

from __future__ import annotations

import re

from gpufair.cache.planner.doc import Node
from gpufair.cache.planner.graph import GraphBuilder
from gpufair.cache.planner.ir_values import constant
from gpufair.cache.planner.model import Val

#: Extended resources that are GPUs or similar accelerators.
_GPU_RESOURCE = re.compile(r"^([a-z0-9.-]+/(gpu|gpu-[a-z0-9-]+|mig-[a-z0-9.-]+)|gpu\.intel\.com/.+|habana\.ai/gaudi)$")


_MAX_GPUS = 4096  # per step: more is a typo or hostile input, not a request


def _count(b: GraphBuilder, step: str, node: Node) -> int:
    """A non-negative integer count; a placeholder is noted as unresolved."""
    value = node.value
    if isinstance(value, bool) or value is None:
        return 0
    text = str(value) if isinstance(value, int) else (node.text() or "")
    try:
        count = float(text)
    except ValueError:
        late = "{{" in text or text.startswith("$")  # a placeholder, filled in at run time
        b.note(node.path, f"GPU count '{text[:40]}' is known only at run time" if late
               else f"GPU count '{text[:40]}' is not a whole number from 0 to {_MAX_GPUS}", step)
        return 0
    if not (0 <= count <= _MAX_GPUS) or count != int(count):
        b.note(node.path, f"GPU count '{text[:40]}' is not a whole number from 0 to {_MAX_GPUS}", step)
        return 0
    return int(count)


def k8s_gpus(b: GraphBuilder, step: str, resources: Node) -> tuple[int, str | None]:
    """GPUs requested in a Kubernetes container's resources (limits win)."""
    for section in ("limits", "requests"):
        for name, qty in resources.get(section).items():
            if _GPU_RESOURCE.match(name):
                return _count(b, step, qty), name
    return 0, None


_IR_INPUT = re.compile(r"""^\{\{\$\.inputs\.parameters\[['"]([^'"]+)['"]\]\}\}$""")


def _bound(node: Node, p_in: dict[str, Val]) -> Node:
    """`node`, or the value its `{{$.inputs.parameters['x']}}` placeholder
    stands for when the task's input x is known (KFP SDK 2.x compiles
    accelerator fields set from pipeline parameters this way)."""
    m = _IR_INPUT.match((node.text() or "").strip()) if isinstance(node.value, str) else None
    val = p_in.get(m.group(1)) if m else None
    if val is None or not val.known or not val.options:
        return node
    return Node(val.options[0][0], node.path, node.ctx, node.anchor)


def ir_gpus(b: GraphBuilder, step: str, resources: Node, p_in: dict[str, Val]) -> tuple[int, str | None]:
    """GPUs in a KFP IR container's `resources.accelerator` (old and new keys);
    a TPU is a placement hint, not a GPU."""
    accel = resources.get("accelerator")
    if accel.missing:
        limit = resources.get("resourceAcceleratorLimit")
        return (_count(b, step, _bound(limit, p_in)), None) if not limit.missing else (0, None)
    count_node = accel.get("resourceCount") if "resourceCount" in accel.as_mapping() else accel.get("count")
    kind_node = accel.get("resourceType") if "resourceType" in accel.as_mapping() else accel.get("type")
    kind = _bound(kind_node, p_in).text()
    count = _count(b, step, _bound(count_node, p_in)) if not count_node.missing else 1
    if kind and "tpu" in kind.lower():
        b.add_hint(step, f"accelerator {kind} x{count} (TPU, not counted as GPUs)")
        return 0, None
    return count, kind


def k8s_hints(node_selector: Node, tolerations: Node, affinity: Node) -> list[str]:
    """Readable placement hints from a pod spec's scheduling fields."""
    hints = [f"nodeSelector {k}={v.text()}" for k, v in node_selector.items()]
    for tol in tolerations.elements():
        key = tol.get("key").text() or "*"
        value = tol.get("value").text()
        effect = tol.get("effect").text() or "any"
        hints.append(f"toleration {key}{'=' + value if value else ''}:{effect}")
    required = affinity.get("nodeAffinity").get("requiredDuringSchedulingIgnoredDuringExecution")
    for term in required.get("nodeSelectorTerms").elements():
        hints.extend(_match_expressions(term.get("matchExpressions")))
    return hints


def _match_expressions(exprs: Node) -> list[str]:
    out = []
    for expr in exprs.elements():
        values = ",".join(v.text() or "" for v in expr.get("values").elements())
        out.append(f"nodeAffinity {expr.get('key').text()} {expr.get('operator').text()} {values}".rstrip())
    return out


def apply_platform(b: GraphBuilder, step: str, config: Node, p_in: dict[str, Val]) -> None:
    """Hints and PVC mounts from a KFP PlatformSpec executor config."""
    if config.missing:
        return
    labels = config.get("nodeSelector").get("labels")
    for hint in k8s_hints(labels, config.get("tolerations"), Node(None, "", config.ctx)):
        b.add_hint(step, hint)
    for term in config.get("nodeAffinity").elements():
        for hint in _match_expressions(term.get("matchExpressions")):
            b.add_hint(step, hint)
    for mount in config.get("pvcMount").elements():
        _pvc(b, step, mount, p_in)
    for claim in config.get("podResourceClaims").elements():
        # Dynamic resource allocation: GPUs may come through a claim whose
        # device count lives in a ResourceClaim(Template) outside this file.
        name = claim.get("resourceClaimTemplateName").text() or claim.get("resourceClaimName").text()
        b.add_hint(step, f"resource claim {name or '?'} (DRA; devices not counted)")


def _pvc(b: GraphBuilder, step: str, mount: Node, p_in: dict[str, Val]) -> None:
    path = mount.get("mountPath").text() or "?"
    found, name = constant(mount)
    param = mount.get("pvcNameParameter")
    why = "is named only at run time"
    for holder in (param, mount):
        if found or holder.missing:
            continue
        runtime = holder.get("runtimeValue")
        found, name = constant(runtime) if not runtime.missing else (False, None)
        if not found and "componentInputParameter" in holder.as_mapping():
            pname = holder.get("componentInputParameter").text() or ""
            val = p_in.get(pname, Val.why("no input of the task or its DAG has that name"))
            found, name = (True, val.options[0][0]) if val.known and val.options else (False, None)
            why = why if found or val.unknown is None else f"is named by '{pname}': {val.unknown}"
    if not found or not isinstance(name, str) or not name:
        b.note(mount.path, f"PVC mounted at {path} {why}", step)
        return
    b.add_hint(step, f"pvc {name} at {path}")
    b.consume(step, f"pvc://{name}", mount.path)
