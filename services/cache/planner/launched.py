"""What a step's Kubernetes manifest launches (an Argo `resource` template
applying a PyTorchJob, TFJob, MPIJob, a Job...): its GPUs and PVC mounts,
so a step that only submits the training job still shows what it uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpufair.cache.planner.errors import PipelineError
from gpufair.cache.planner.loader import load_documents
from gpufair.cache.planner.platform import is_gpu_resource

MAX_MANIFEST_BYTES = 1024 * 1024


@dataclass
class Launched:
    """A manifest's workload: kind, GPUs over all replicas, PVCs its pods mount."""

    kind: str
    gpus: int = 0
    accelerator: str | None = None
    claims: list[str] = field(default_factory=list)


def launched(manifest: str, source: str) -> Launched | None:
    """The workload a manifest creates, or None (not a workload, unreadable,
    or holding `{{placeholders}}` YAML cannot carry)."""
    if len(manifest) > MAX_MANIFEST_BYTES:
        return None
    try:
        docs = load_documents(manifest, source)
    except PipelineError:
        return None
    doc = docs[0].data if docs else None
    if not isinstance(doc, dict) or not isinstance(doc.get("spec"), dict):
        return None
    out = Launched(str(doc.get("kind") or "?"))
    for replicas, pod in _pods(doc["spec"]):
        for c in pod.get("containers") or []:
            for name, qty in _gpu_limits(c):
                out.gpus += replicas * qty
                out.accelerator = out.accelerator or name
        for vol in pod.get("volumes") or []:
            claim = ((vol or {}).get("persistentVolumeClaim") or {}).get("claimName")
            if isinstance(claim, str) and claim and claim not in out.claims:
                out.claims.append(claim)
    return out if out.gpus or out.claims else None


def _pods(spec: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(replicas, pod spec) of a Kubeflow training job's replica specs
    (`pytorchReplicaSpecs`, `tfReplicaSpecs`, `mpiReplicaSpecs`...) or of a
    plain Job / Deployment template."""
    out = []
    groups = [v for k, v in spec.items() if k.endswith("ReplicaSpecs") and isinstance(v, dict)]
    for group in groups:
        for rs in group.values():
            if isinstance(rs, dict):
                out.append((_int(rs.get("replicas"), 1), _pod(rs.get("template"))))
    if not groups and isinstance(spec.get("template"), dict):
        out.append((_int(spec.get("parallelism", spec.get("replicas")), 1), _pod(spec["template"])))
    return [(n, pod) for n, pod in out if pod]


def _pod(template: Any) -> dict[str, Any]:
    spec = template.get("spec") if isinstance(template, dict) else None
    return spec if isinstance(spec, dict) else {}


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


def _gpu_limits(container: Any) -> list[tuple[str, int]]:
    res = container.get("resources") if isinstance(container, dict) else None
    if not isinstance(res, dict):
        return []
    for section in ("limits", "requests"):
        got = [(k, _int(_num(v), 0)) for k, v in (res.get(section) or {}).items() if is_gpu_resource(k)]
        if got:
            return got
    return []


def _num(value: Any) -> Any:
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return value
