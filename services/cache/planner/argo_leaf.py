"""An Argo leaf template (container, script, resource...): GPUs, hints, data."""

from __future__ import annotations

from gpufair.cache.planner.argo_text import Scope, resolve
from gpufair.cache.planner.doc import Node
from gpufair.cache.planner.graph import GraphBuilder, looks_like_data, output_args
from gpufair.cache.planner.launched import launched
from gpufair.cache.planner.model import Val
from gpufair.cache.planner.platform import k8s_gpus, k8s_hints


def _texts(container: Node) -> list[Node]:
    """The container's command, args (less output locations) and env values."""
    line = list(container.get("command").elements()) + list(container.get("args").elements())
    skip = output_args([n.value for n in line])
    nodes = [n for i, n in enumerate(line) if i not in skip]
    nodes += [e.get("value") for e in container.get("env").elements()]
    if not container.get("source").missing:
        nodes.append(container.get("source"))
    return [n for n in nodes if isinstance(n.value, str)]


def scan_text(b: GraphBuilder, key: str, node: Node, scope: Scope, endpoints: dict[str, str]) -> None:
    """Datasets in one argument: known renderings, and unknown data inputs."""
    resolved = resolve(node.value, scope, node.path)
    for text, origin in resolved.options:
        b.use_text_values(key, text, origin)
    for expr, val in resolved.unknowns:
        if expr.startswith(("$.outputs", "outputs.")):
            continue  # where the step writes its own outputs, not a data input
        name = expr.rsplit(".", 1)[-1]
        if val.produced_by is None and val.unknown and (
            expr.startswith("inputs.artifacts.") or looks_like_data(name)
        ):
            b.note(node.path, val.unknown, key)


def containers(tmpl: Node) -> list[Node]:
    """The containers a template runs (one, or those of a containerSet)."""
    for field in ("container", "script"):
        if not tmpl.get(field).missing:
            return [tmpl.get(field)]
    return list(tmpl.get("containerSet").get("containers").elements())


def scan_leaf(b: GraphBuilder, key: str, tmpl: Node, scope: Scope, endpoints: dict[str, str],
              volumes: dict[str, Val], spec: Node) -> None:
    """Record a leaf's GPUs, placement hints, PVC mounts and datasets."""
    for c in containers(tmpl):
        count, accel = k8s_gpus(b, key, c.get("resources"))
        if count:
            b.add_gpus(key, count, accel)
        for node in _texts(c):
            scan_text(b, key, node, scope, endpoints)
        for mount in c.get("volumeMounts").elements():
            claim = volumes.get(mount.get("name").text() or "")  # a data volume's URI
            if claim is None:
                continue
            if not claim.known:
                b.note(mount.path, f"the PVC mounted at {mount.get('mountPath').text()}: "
                                   f"{claim.unknown}", key)
            for uri, origin in claim.options:
                kind, _, where = uri.partition("://")
                b.add_hint(key, f"{kind} {where} at {mount.get('mountPath').text()}")
                b.consume(key, uri, origin)
    manifest = tmpl.get("resource").get("manifest")
    if isinstance(manifest.value, str):
        _launched(b, key, manifest, scope)
    for source in (spec, tmpl):
        for hint in k8s_hints(source.get("nodeSelector"), source.get("tolerations"), source.get("affinity")):
            b.add_hint(key, hint)
    for name, val in scope.items():
        if name.startswith("inputs.artifacts."):
            _use_artifact(b, key, tmpl, name, val, endpoints)
    prefix = "inputs.parameters."
    b.note_split_location(key, {n[len(prefix):]: v for n, v in scope.items() if n.startswith(prefix)},
                          f"{tmpl.path}.inputs.parameters")


def _launched(b: GraphBuilder, key: str, manifest: Node, scope: Scope) -> None:
    """GPUs and PVCs of the workload a `resource` template creates (KFP v1
    pipelines submit PyTorchJobs and TFJobs this way)."""
    text = resolve(manifest.value, scope, manifest.path).options[0][0]
    job = launched(text, manifest.path)
    if job is None:
        return
    gpus, accel, claims = 0, None, {}
    for replicas, pod in job.pods:
        for c in pod.get("containers").elements():
            count, name = k8s_gpus(b, key, c.get("resources"))
            gpus, accel = gpus + replicas * count, accel or name
        for vol in pod.get("volumes").elements():
            claim = vol.get("persistentVolumeClaim").get("claimName").text()
            if claim:
                claims.setdefault(claim)
    if not (gpus or claims):
        return
    b.add_hint(key, f"launches a {job.kind}")
    if gpus:
        b.add_gpus(key, gpus, accel)
    for claim in claims:
        b.add_hint(key, f"pvc {claim} in the {job.kind}")
        b.consume(key, f"pvc://{claim}", manifest.path)


def _use_artifact(b: GraphBuilder, key: str, tmpl: Node, name: str, val: Val, endpoints: dict[str, str]) -> None:
    where = f"{tmpl.path}.inputs.artifacts.{name[len('inputs.artifacts.'):]}"
    if val.produced_by is not None:
        return
    if not val.known:
        b.note(where, val.unknown or "unknown", key)
        return
    for uri, origin in val.options:
        if isinstance(uri, str) and uri:
            b.use_text_values(key, uri, origin)
            if uri in endpoints:
                b.consume(key, uri, origin, endpoints[uri])
