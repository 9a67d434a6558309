"""What a step's Kubernetes manifest launches (an Argo `resource` template
applying a PyTorchJob, TFJob, MPIJob, a Job...): its pods, so a step that
only submits the training job still shows the GPUs and PVCs it uses."""

from __future__ import annotations

from dataclasses import dataclass

from gpufair.cache.planner.doc import Node, root_node
from gpufair.cache.planner.errors import PipelineError
from gpufair.cache.planner.loader import load_documents

MAX_MANIFEST_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Launched:
    """A manifest's workload: its kind and (replicas, pod spec) per pod template."""

    kind: str
    pods: tuple[tuple[int, Node], ...]


def launched(manifest: str, source: str) -> Launched | None:
    """The workload a manifest creates, or None (no pods, unreadable, or
    holding `{{placeholders}}` YAML cannot carry)."""
    if len(manifest) > MAX_MANIFEST_BYTES:
        return None
    try:
        docs = load_documents(manifest, source)
    except PipelineError:
        return None
    if not docs or not isinstance(docs[0].data, dict):
        return None
    doc = root_node(docs[0].data, source, docs[0].marks)
    pods = tuple((n, pod) for n, pod in _pods(doc.get("spec")) if isinstance(pod.value, dict))
    return Launched(doc.get("kind").text() or "?", pods) if pods else None


def _pods(spec: Node) -> list[tuple[int, Node]]:
    """(replicas, pod spec) of a Kubeflow training job's replica specs
    (`pytorchReplicaSpecs`, `tfReplicaSpecs`, `mpiReplicaSpecs`...) or of a
    plain Job / Deployment template."""
    if not isinstance(spec.value, dict):
        return []
    groups = [spec.get(k) for k, v in spec.value.items() if k.endswith("ReplicaSpecs") and isinstance(v, dict)]
    if groups:
        return [(_replicas(rs.get("replicas")), rs.get("template").get("spec"))
                for group in groups for _, rs in group.items() if isinstance(rs.value, dict)]
    if isinstance(spec.get("template").value, dict):
        count = spec.get("parallelism") if not spec.get("parallelism").missing else spec.get("replicas")
        return [(_replicas(count), spec.get("template").get("spec"))]
    return []


def _replicas(node: Node) -> int:
    value = node.value
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 1
