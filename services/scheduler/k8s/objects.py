"""Kubernetes Nodes and Pods as the admission core reads them (pure).

Input is the API's own JSON (what `kubectl get -o json` prints, or the list
call's items), never the client library's model classes: fixtures are then
real recorded objects, and the core needs no Kubernetes import. A malformed
object raises `ObjectError` naming the object and the field; the caller
skips it and says so.

The names gpufair and the job author share live here, once: the scheduling
gate, the job label and the annotations a Job's pod template carries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

#: The scheduling gate gpufair lifts once it has placed the pod.
GATE = "gpufair.io/admission"
#: Pods of one gpufair job (and the job id they register under) share this label.
JOB_LABEL = "gpufair.io/job"
#: How many pods the job has: it is admitted only when all can be placed.
PODS_ANNOTATION = "gpufair.io/pods"
#: Optional figures for the queue order (samples in the whole run, global batch, model).
SAMPLES_ANNOTATION = "gpufair.io/samples"
BATCH_ANNOTATION = "gpufair.io/global-batch"
MODEL_ANNOTATION = "gpufair.io/model"
#: Optional dataset URI: placement prefers a node whose cache holds it.
DATASET_ANNOTATION = "gpufair.io/dataset"
#: Written by gpufair on a pod it keeps gated: why it waits.
REASON_ANNOTATION = "gpufair.io/reason"
#: The device plugin's extended resource; one unit is one GPU a pod holds alone.
GPU_RESOURCE = "nvidia.com/gpu"
#: GPU Feature Discovery's label naming the GPU model (the profiles' device type).
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
#: Pods in these phases hold nothing any more.
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

Obj = Mapping[str, Any]


class ObjectError(ValueError):
    """An API object without a field the core needs, or with a malformed one."""


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class NodeView:
    """A Node: its allocatable GPUs and what decides whether a pod may go there."""

    name: str
    gpus: int
    labels: Mapping[str, str]
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False

    @property
    def usable(self) -> bool:
        """Ready and not cordoned."""
        return self.ready and not self.unschedulable


@dataclass(frozen=True)
class PodView:
    """A Pod: identity, the GPUs it holds or will hold, and its scheduling directives."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    created_s: float
    phase: str
    gpus: int
    node_name: str  # bound to this node ("" while pending)
    gates: tuple[str, ...]
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    owner_uid: str  # the controlling owner (the Job), "" if none
    node_selector: Mapping[str, str]
    node_terms: tuple[Obj, ...] | None  # required node affinity terms; None: none given
    tolerations: tuple[Obj, ...]
    affinity: Obj = field(default_factory=dict, compare=False)  # spec.affinity as given (for the patch)
    deleting: bool = False  # has a deletionTimestamp: still holds its GPUs, but is on its way out

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def pinned_node(self) -> str:
        """The one node its required node affinity allows by name (how gpufair pins
        a pod, and how DaemonSets do), else ""."""
        if not self.node_terms:
            return ""
        names = {_pinned_name(term) for term in self.node_terms}
        return names.pop() if len(names) == 1 else ""


def _pinned_name(term: Obj) -> str:
    for req in term.get("matchFields") or ():
        if (req.get("key"), req.get("operator")) == ("metadata.name", "In") and len(req.get("values") or ()) == 1:
            return str(req["values"][0])
    return ""


def _at(obj: Obj, path: str, where: str) -> Any:
    """The value at a dotted path; None where it is absent; ObjectError when a
    step on the way is not a mapping."""
    value: Any = obj
    parts = path.split(".")
    for i, part in enumerate(parts):
        if not isinstance(value, Mapping):
            raise ObjectError(f"{where}: {'.'.join(parts[:i])} is not a mapping")
        value = value.get(part)
        if value is None:
            return None
    return value


def _map(obj: Obj, path: str, where: str) -> dict[str, Any]:
    value = _at(obj, path, where)
    if value is not None and not isinstance(value, Mapping):
        raise ObjectError(f"{where}: {path} is not a mapping")
    return dict(value or {})


def _list(obj: Obj, path: str, where: str) -> list[Any]:
    value = _at(obj, path, where)
    if value is not None and (not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value)):
        raise ObjectError(f"{where}: {path} is not a list of mappings")
    return value or []


def _terms(obj: Obj, where: str) -> tuple[Obj, ...] | None:
    """Required node affinity terms, each requirement checked for form (None: none given)."""
    path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    if not _map(obj, path, where):
        return None
    terms = _list(obj, f"{path}.nodeSelectorTerms", where)
    for i, term in enumerate(terms):
        for part in ("matchExpressions", "matchFields"):
            reqs = term.get(part) or []
            for j, req in enumerate(reqs if isinstance(reqs, list) else [None]):
                values = req.get("values") or [] if isinstance(req, Mapping) else None
                if not (isinstance(req, Mapping) and isinstance(req.get("key"), str)
                        and isinstance(req.get("operator"), str) and isinstance(values, list)
                        and all(isinstance(v, str) for v in values)):
                    raise ObjectError(f"{where}: {path}.nodeSelectorTerms[{i}].{part}[{j}] needs a key, an "
                                      f"operator and a list of string values")
    return tuple(terms)


def _strings(m: Mapping[str, Any], path: str, where: str) -> dict[str, str]:
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in m.items()):
        raise ObjectError(f"{where}: {path} must map strings to strings")
    return dict(m)


def _name(obj: Obj, kind: str) -> tuple[str, Obj]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ObjectError(f"a {kind} without metadata.name")
    return meta["name"], meta


def whole_count(raw: Any, where: str) -> int:
    """A count of an extended resource: a whole number, as JSON or quantity text ("2", "2000m")."""
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        return raw
    text = raw.strip() if isinstance(raw, str) else ""
    if text.isdigit():
        return int(text)
    if text.endswith("m") and text[:-1].isdigit() and int(text[:-1]) % 1000 == 0:
        return int(text[:-1]) // 1000
    raise ObjectError(f"{where} is {raw!r}, not a whole number")


def parse_time(raw: Any, where: str) -> float:
    """RFC 3339 (`2024-05-01T10:00:00Z`) to Unix seconds."""
    try:
        return datetime.fromisoformat(str(raw).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ObjectError(f"{where}: {raw!r} is not an RFC 3339 time") from None


def parse_node(obj: Obj) -> NodeView:
    """A Node from its API JSON (ObjectError if malformed)."""
    name, meta = _name(obj, "node")
    where = f"node {name}"
    gpus = _map(obj, "status.allocatable", where).get(GPU_RESOURCE, 0)
    taints = tuple(Taint(str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", "")))
                   for t in _list(obj, "spec.taints", where))
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in _list(obj, "status.conditions", where))
    return NodeView(name, whole_count(gpus, f"{where}: status.allocatable[{GPU_RESOURCE!r}]"),
                    _strings(_map(obj, "metadata.labels", where), "metadata.labels", where), taints, ready,
                    _map(obj, "spec", where).get("unschedulable") is True)


def _gpus(obj: Obj, where: str) -> int:
    """GPUs the pod holds: the sum over its containers, or its largest init container if more
    (the scheduler's effective request)."""
    def need(c: Obj, i: int, kind: str) -> int:
        for part in ("limits", "requests"):  # extended resources: limits, or requests equal to them
            values = _map(c, f"resources.{part}", f"{where}: spec.{kind}[{i}]")
            if GPU_RESOURCE in values:
                return whole_count(values[GPU_RESOURCE], f"{where}: spec.{kind}[{i}].resources.{part}"
                                                         f"[{GPU_RESOURCE!r}]")
        return 0

    main = sum(need(c, i, "containers") for i, c in enumerate(_list(obj, "spec.containers", where)))
    init = max((need(c, i, "initContainers") for i, c in enumerate(_list(obj, "spec.initContainers", where))),
               default=0)
    return max(main, init)


def parse_pod(obj: Obj) -> PodView:
    """A Pod from its API JSON (ObjectError if malformed)."""
    name, meta = _name(obj, "pod")
    namespace = meta.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        raise ObjectError(f"pod {name}: no metadata.namespace")
    where = f"pod {namespace}/{name}"
    spec = _map(obj, "spec", where)
    if not spec.get("containers"):
        raise ObjectError(f"{where}: no spec.containers")
    if "creationTimestamp" not in meta:
        raise ObjectError(f"{where}: no metadata.creationTimestamp")
    owners = _list(obj, "metadata.ownerReferences", where)
    return PodView(
        namespace=namespace, name=name, uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        created_s=parse_time(meta["creationTimestamp"], f"{where}: metadata.creationTimestamp"),
        phase=str(_map(obj, "status", where).get("phase") or "Pending"), gpus=_gpus(obj, where),
        node_name=str(spec.get("nodeName") or ""),
        gates=tuple(str(g.get("name", "")) for g in _list(obj, "spec.schedulingGates", where)),
        labels=_strings(_map(obj, "metadata.labels", where), "metadata.labels", where),
        annotations=_strings(_map(obj, "metadata.annotations", where), "metadata.annotations", where),
        owner_uid=next((str(o.get("uid", "")) for o in owners if o.get("controller")), ""),
        node_selector=_strings(_map(obj, "spec.nodeSelector", where), "spec.nodeSelector", where),
        node_terms=_terms(obj, where), tolerations=tuple(_list(obj, "spec.tolerations", where)),
        affinity=_map(obj, "spec.affinity", where), deleting=bool(meta.get("deletionTimestamp")))
