"""Entry point: YAML text in any supported KFP form to a Pipeline."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufair.cache.planner.doc import Node, root_node
from gpufair.cache.planner.errors import PipelineError
from gpufair.cache.planner.loader import LoadLimits, load_documents
from gpufair.cache.planner.model import Pipeline

_ARGO_KINDS = ("Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate", "CronWorkflow")


def _kind_of(doc: Node) -> str:
    """'argo', 'ir', 'job' (IR wrapped in a PipelineJob), 'version' (IR in a
    KFP Kubernetes-native PipelineVersion), 'platform', 'meta' (that format's
    Pipeline: a name, no steps) or 'unknown'."""
    value = doc.value
    if not isinstance(value, dict):
        return "unknown"
    api = value.get("apiVersion")
    if isinstance(api, str) and api.startswith("argoproj.io/") or value.get("kind") in _ARGO_KINDS:
        return "argo"
    if isinstance(api, str) and api.startswith("pipelines.kubeflow.org/"):
        spec = value.get("spec")
        if value.get("kind") == "PipelineVersion" and isinstance(spec, dict) and "pipelineSpec" in spec:
            return "version"
        if value.get("kind") == "Pipeline":
            return "meta"
    if "pipelineSpec" in value:
        return "job"
    if "root" in value and ({"components", "deploymentSpec", "pipelineInfo", "schemaVersion"} & value.keys()):
        return "ir"
    if "platforms" in value:
        return "platform"
    return "unknown"


def parse_pipeline(
    text: str | bytes,
    source: str = "<pipeline>",
    *,
    parameters: Mapping[str, Any] | None = None,
    limits: LoadLimits | None = None,
) -> Pipeline:
    """Parse a Kubeflow pipeline (Argo Workflow or KFP v2 IR) into a Pipeline.

    `parameters` override pipeline parameter defaults (like a run's inputs).
    Raises PipelineError (an InvalidArgument) naming the file, the path in
    the document and what was expected.
    """
    docs = [d for d in load_documents(text, source, limits) if d.data is not None]
    if not docs:
        raise PipelineError(source, "", "the file holds no YAML document")
    nodes = [root_node(d.data, source, d.marks) for d in docs]
    kinds = [_kind_of(n) for n in nodes]
    main = [i for i, k in enumerate(kinds) if k in ("argo", "ir", "job", "version")]
    if not main:
        first = nodes[0]
        if not isinstance(first.value, dict):
            raise first.expected("a mapping (an Argo Workflow or a KFP PipelineSpec)")
        raise first.error(
            "not a Kubeflow pipeline: expected an Argo Workflow (apiVersion argoproj.io/v1alpha1) "
            "or a KFP v2 PipelineSpec (with 'root' and 'components')"
        )
    if len(main) > 1:
        raise nodes[main[1]].error(f"document {main[1] + 1}: a second pipeline in one file is not supported")
    for i, kind in enumerate(kinds):
        if kind == "unknown":
            raise nodes[i].error(
                f"document {i + 1}: expected a PlatformSpec ('platforms:') next to the pipeline"
            )
    overrides = dict(parameters or {})
    doc, kind = nodes[main[0]], kinds[main[0]]
    platform = next((nodes[i] for i, k in enumerate(kinds) if k == "platform"), None)
    return _dispatch(doc, kind, platform, overrides)


def _dispatch(doc: Node, kind: str, platform: Node | None, overrides: dict[str, Any]) -> Pipeline:
    # Imported here so that importing the package stays cheap.
    from gpufair.cache.planner.argo import parse_argo
    from gpufair.cache.planner.ir import parse_ir
    from gpufair.cache.planner.ir_values import run_parameters

    if kind == "argo":
        return parse_argo(doc, overrides)
    if kind == "version":
        spec = doc.get("spec")
        plat = spec.get("platformSpec")
        if isinstance(plat.value, dict) and plat.value:
            platform = plat if "platforms" in plat.value else Node({"platforms": plat.value}, plat.path, plat.ctx)
        ir = spec.get("pipelineSpec")
        ir.as_mapping(optional=False)
        return parse_ir(ir, platform, overrides)
    if kind == "job":
        spec = doc.get("pipelineSpec")
        spec.as_mapping(optional=False)
        runtime = doc.get("runtimeConfig")
        values = run_parameters(runtime.get("parameterValues").as_mapping(),
                                runtime.get("parameters").as_mapping())
        return parse_ir(spec, platform, overrides, runtime=values)
    return parse_ir(doc, platform, overrides)
