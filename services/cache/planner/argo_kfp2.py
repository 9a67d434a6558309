"""KFP v2 pipelines compiled to Argo: recover the embedded IR and plan that.

The KFP v2 Argo compiler stores each component and implementation as JSON
in `spec.arguments.parameters` and runs them through generic driver and
launcher templates, so the Argo graph itself says little. The embedded IR
holds the real tasks, importers and inputs.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gpufair.cache.planner.doc import Node, root_node
from gpufair.cache.planner.ir_values import run_parameters
from gpufair.cache.planner.model import Pipeline

FORMAT = "argo-workflow-kfp-v2"
_REF = re.compile(r"^\{\{\s*workflow\.parameters\.([^\s{}]+)\s*\}\}$")


def _params(spec: Node) -> dict[str, Node]:
    out = {}
    for p in spec.get("arguments").get("parameters").elements():
        name = p.get("name").text()
        if name:
            out[name] = p.get("value")
    return out


def is_kfp_v2(spec: Node) -> bool:
    """True for a workflow produced by the KFP v2 Argo compiler."""
    return isinstance(spec.value, dict) and "components-root" in _params(spec)


def _json(node: Node, params: dict[str, Node]) -> Any:
    """Decode a JSON argument, following a `{{workflow.parameters.x}}` reference."""
    text = node.text() or ""
    m = _REF.match(text.strip())
    if m:
        if m.group(1) not in params:
            raise node.error(f"references unknown workflow parameter '{m.group(1)}'")
        node = params[m.group(1)]
        text = node.text() or ""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise node.error(f"expected embedded KFP JSON: {exc}") from None
    if not isinstance(value, dict):
        raise node.expected("a JSON object")
    return value


def _collect(spec: Node, params: dict[str, Node]
             ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(components, executors, runtime parameter values, Kubernetes platform
    configs by executor) from the driver tasks."""
    components: dict[str, Any] = {}
    executors: dict[str, Any] = {}
    runtime: dict[str, Any] = {}
    configs: dict[str, dict[str, Any]] = {}  # executor label -> component ref -> its Kubernetes config
    for tmpl in spec.get("templates").elements():
        for task in tmpl.get("dag").get("tasks").elements():
            args = {a.get("name").text(): a.get("value") for a in task.get("arguments").get("parameters").elements()}
            if "runtime-config" in args and (args["runtime-config"].text() or "").strip():
                config = _json(args["runtime-config"], params)
                runtime.update(run_parameters(config.get("parameterValues"), config.get("parameters")))
            if "task" not in args or "component" not in args:
                continue
            ref = _json(args["task"], params).get("componentRef")
            ref = ref.get("name") if isinstance(ref, dict) else None
            if not isinstance(ref, str):
                continue
            comp = _json(args["component"], params)
            components[ref] = comp
            label = comp.get("executorLabel")
            for kind in ("importer", "container"):
                if kind in args and isinstance(label, str):
                    executors[label] = {kind: _json(args[kind], params)}
            config = args.get("kubernetes-config")
            if config is not None and isinstance(label, str) and (config.text() or "").strip():
                configs.setdefault(label, {})[ref] = _json(config, params)  # PVC mounts, node selectors...
    # The Kubernetes config comes per task, the IR keys it per executor: components
    # that share an executor but not a config each get an executor of their own.
    platform: dict[str, Any] = {}
    for label, by_ref in configs.items():
        if all(c == next(iter(by_ref.values())) for c in by_ref.values()):
            platform[label] = next(iter(by_ref.values()))
            continue
        for ref, config in by_ref.items():
            own = f"{label}.{ref}"
            components[ref] = {**components[ref], "executorLabel": own}
            executors[own] = executors.get(label, {})
            platform[own] = config
    return components, executors, runtime, platform


def parse_kfp_v2_argo(doc: Node, spec: Node, overrides: dict[str, Any]) -> Pipeline:
    """Rebuild the PipelineSpec embedded in a KFP v2 Argo workflow and parse it."""
    from gpufair.cache.planner.ir import parse_ir

    params = _params(spec)
    root = _json(params["components-root"], params)
    components, executors, runtime, platform = _collect(spec, params)
    for name, node in params.items():
        # Components not reached through a driver task (e.g. nested DAGs).
        if name.startswith("components-comp-") and name[len("components-"):] not in components:
            components[name[len("components-"):]] = _json(node, params)
    meta = doc.get("metadata")
    name = meta.get("name").text() or (meta.get("generateName").text() or doc.ctx.source).rstrip("-")
    ir = {
        "pipelineInfo": {"name": name},
        "root": root,
        "components": components,
        "deploymentSpec": {"executors": executors},
    }
    source = f"{doc.ctx.source} (KFP IR embedded in spec.arguments.parameters)"
    kube = root_node({"platforms": {"kubernetes": {"deploymentSpec": {"executors": platform}}}},
                     source, {}) if platform else None
    return parse_ir(root_node(ir, source, {}), kube, overrides, FORMAT, runtime)
