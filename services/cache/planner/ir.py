"""KFP v2 IR (PipelineSpec) to a flattened Pipeline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpufair.cache.planner.dagutil import expand, sinks, topo_order
from gpufair.cache.planner.doc import Node
from gpufair.cache.planner.graph import GraphBuilder, output_args, says_not_data
from gpufair.cache.planner.ir_values import (
    Outputs, artifact_value, constant, loop_binding, param_value,
)
from gpufair.cache.planner.model import CONTAINER, DAG, IMPORTER, OTHER, Pipeline, Step, Val
from gpufair.cache.planner.platform import apply_platform, ir_gpus

FORMAT = "kfp-v2-ir"
MAX_NESTING = 32


@dataclass(frozen=True)
class _Ctx:
    b: GraphBuilder
    components: Node
    executors: Node
    platform: Node


def parse_ir(doc: Node, platform: Node | None, overrides: dict[str, Any], fmt: str = FORMAT,
             runtime: dict[str, Any] | None = None) -> Pipeline:
    """Flatten a PipelineSpec (plus an optional PlatformSpec document).

    `runtime` holds parameter values from a run's runtime config; `overrides`
    (from the caller) win over both them and the defaults.
    """
    version = doc.get("schemaVersion")
    text = version.text()
    if text is not None and not text.startswith("2."):
        raise version.error(f"unsupported schemaVersion '{text}': expected KFP IR 2.x")
    root = doc.require("root", "the root DAG component")
    b = GraphBuilder()
    kube = (platform or Node(None, "platforms", doc.ctx)).get("platforms").get("kubernetes")
    ctx = _Ctx(b, doc.get("components"), doc.get("deploymentSpec").get("executors"),
               kube.get("deploymentSpec").get("executors"))
    params = _root_params(b, root, overrides, runtime or {})
    arts: dict[str, Val] = {}
    for name, spec in root.get("inputDefinitions").get("artifacts").items():
        params.pop(name, None)
        if name in overrides:  # `--param name=URI` names the artifact a run is given
            arts[name] = Val.of(overrides[name], f"--param {name}")
            b.use_location(None, overrides[name], f"--param {name}")
            continue
        arts[name] = Val.why(f"pipeline input artifact '{name}' is chosen at submission; "
                             f"name it with --param {name}=URI")
        b.note(spec.path, arts[name].unknown or "")
    declared = root.get("inputDefinitions").get("parameters").as_mapping().keys() | arts.keys()
    for name in sorted(overrides.keys() - declared):
        b.note(f"--param {name}", f"the pipeline has no input called '{name}'")
    _walk(ctx, root, "", params, arts, None, (), 0)
    name = doc.get("pipelineInfo").get("name").text() or doc.ctx.source
    shown = {k: (v.options[0][0] if v.known and v.options else None) for k, v in params.items()}
    return b.build(name, fmt, doc.ctx.source, shown)


def _root_params(b: GraphBuilder, root: Node, overrides: dict[str, Any],
                 runtime: dict[str, Any]) -> dict[str, Val]:
    params: dict[str, Val] = {}
    for name, spec in root.get("inputDefinitions").get("parameters").items():
        spec.as_mapping(optional=False)
        default = spec.get("defaultValue")
        if name in overrides:
            params[name] = Val.of(overrides[name], f"--param {name}")
        elif name in runtime:
            params[name] = Val.of(runtime[name], f"runtimeConfig.parameterValues.{name}")
        elif not default.missing:
            found, value = constant(default) if isinstance(default.value, dict) and (
                "constantValue" in default.value) else (True, default.value)
            params[name] = Val.of(value, default.path) if found else Val.why("no default")
        else:
            params[name] = Val.why(
                f"pipeline parameter '{name}' has no default value; pass one with --param {name}=..."
            )
    for name, value in overrides.items():
        params.setdefault(name, Val.of(value, f"--param {name}"))
    for name, val in params.items():
        if says_not_data(name):  # an output root is no dataset
            continue
        for value, origin in val.options:
            b.use_text_values(None, value, origin)
    return params


def _task_deps(name: str, task: Node, siblings: dict[str, Node]) -> list[str]:
    task.as_mapping(optional=False)
    deps: dict[str, Node] = {}
    for dep in task.get("dependentTasks").elements():
        deps[dep.name("a task name")] = dep
    inputs = task.get("inputs")
    for _, spec in list(inputs.get("parameters").items()) + list(inputs.get("artifacts").items()):
        for key in ("taskOutputParameter", "taskOutputArtifact"):
            if isinstance(spec.value, dict) and key in spec.value:
                producer = spec.get(key).require("producerTask")
                deps.setdefault(producer.name("a task name"), producer)
    for dep, at in deps.items():
        if dep not in siblings:
            raise at.error(f"task '{name}' depends on unknown task '{dep}'")
        if dep == name:
            raise at.error(f"task '{name}' depends on itself")
    return list(deps)


def _mount_producers(ctx: _Ctx, name: str, task: Node, siblings: dict[str, Node]) -> list[str]:
    """Sibling tasks whose output names a PVC this task mounts (kfp-kubernetes'
    CreatePVC): the task waits for them though `dependentTasks` may not say so."""
    comp = ctx.components.get(task.get("componentRef").get("name").text() or "")
    config = ctx.platform.get(comp.get("executorLabel").text() or "")
    out: list[str] = []
    for mount in config.get("pvcMount").elements():
        for holder in (mount, mount.get("pvcNameParameter")):
            producer = holder.get("taskOutputParameter").get("producerTask").text()
            if producer in siblings and producer != name and producer not in out:
                out.append(producer)
    return out


def _walk(ctx: _Ctx, comp: Node, prefix: str, params: dict[str, Val], arts: dict[str, Val],
          parent: str | None, entry: tuple[str, ...], depth: int) -> tuple[tuple[str, ...], Outputs]:
    """Add the steps of one DAG component; return its exit steps and outputs."""
    if depth > MAX_NESTING:
        raise comp.error(f"DAG components nested deeper than {MAX_NESTING} levels (recursive componentRef?)")
    dag = comp.get("dag")
    tasks_node = dag.get("tasks")
    tasks = dict(tasks_node.items())
    deps = {name: list(dict.fromkeys(_task_deps(name, task, tasks) + _mount_producers(ctx, name, task, tasks)))
            for name, task in tasks.items()}
    exits: dict[str, tuple[str, ...]] = {}
    outputs: Outputs = {}
    for name in topo_order(list(tasks), deps, tasks_node):
        waits = expand(deps[name], exits, entry)
        exits[name] = _task(ctx, tasks[name], prefix + name, name, params, arts, outputs, parent, waits, depth)
    group_exits = expand(sinks(list(tasks), deps), exits, ())
    return group_exits, _dag_outputs(dag, outputs)


def _dag_outputs(dag: Node, inner: Outputs) -> dict[tuple[str, str], Val]:
    """A DAG component's outputs, keyed ('', name), from its subtasks' outputs."""
    out: dict[tuple[str, str], Val] = {}
    for name, spec in dag.get("outputs").get("artifacts").items():
        for sel in spec.get("artifactSelectors").elements():
            key = (sel.get("producerSubtask").text() or "", sel.get("outputArtifactKey").text() or "")
            out[("", name)] = inner.get(key) or Val(produced_by=key[0])
    for name, spec in dag.get("outputs").get("parameters").items():
        sel = spec.get("valueFromParameter")
        key = (sel.get("producerSubtask").text() or "", sel.get("outputParameterKey").text() or "")
        out[("", name)] = inner.get(key) or Val.why(f"output '{name}' is known only at run time")
    return out


def _task(ctx: _Ctx, task: Node, key: str, local: str, params: dict[str, Val], arts: dict[str, Val],
          outputs: Outputs, parent: str | None, waits: tuple[str, ...], depth: int) -> tuple[str, ...]:
    """Add one task (and, for a DAG task, its subtree); return its exit steps."""
    ref = task.require("componentRef", "the component it runs").require("name")
    comp_name = ref.name("a component name")
    comp = ctx.components.get(comp_name)
    if comp.missing:
        raise ref.error(f"unknown component '{comp_name}' (not in 'components')")
    inputs = task.get("inputs")
    p_in = {n: param_value(s, params, outputs) for n, s in inputs.get("parameters").items()}
    a_in = {n: artifact_value(s, arts, outputs) for n, s in inputs.get("artifacts").items()}
    loop = loop_binding(task, p_in, a_in)
    condition = task.get("triggerPolicy").get("condition").text()
    if not comp.get("dag").missing:
        ctx.b.add_step(task, Step(key, DAG, comp_name, waits, condition=condition, loop=loop, parent=parent))
        child_exits, group_out = _walk(ctx, comp, key + "/", p_in, a_in, key, (key,), depth + 1)
        outputs.update({(local, k): v for (_, k), v in group_out.items()})
        return child_exits or (key,)
    label_node = comp.require("executorLabel", "a DAG or an executor")
    label = label_node.name("an executor label")
    executor = ctx.executors.get(label)
    if executor.missing:
        raise label_node.error(f"unknown executor '{label}' (not in deploymentSpec.executors)")
    if not executor.get("importer").missing:
        _importer(ctx, task, key, comp_name, comp, executor.get("importer"), p_in, outputs, local, parent, waits, condition, loop)
    else:
        kind = CONTAINER if not executor.get("container").missing else OTHER
        ctx.b.add_step(task, Step(key, kind, comp_name, waits, condition=condition, loop=loop, parent=parent))
        _consume_inputs(ctx.b, key, inputs, p_in, a_in)
        _container(ctx.b, key, executor.get("container"), p_in)
        _mark_outputs(comp, local, key, outputs)
    # A platform config's componentInputParameter names an input of the
    # enclosing DAG (kfp-kubernetes binds pipeline parameters that way).
    apply_platform(ctx.b, key, ctx.platform.get(label), {**p_in, **params})
    return (key,)


def _importer(ctx: _Ctx, task: Node, key: str, comp_name: str, comp: Node, spec: Node, p_in: dict[str, Val],
              outputs: Outputs, local: str, parent: str | None, waits: tuple[str, ...],
              condition: str | None, loop: str | None) -> None:
    ctx.b.add_step(task, Step(key, IMPORTER, comp_name, waits,
                              condition=condition, loop=loop, parent=parent))
    uri_node = spec.require("artifactUri", "the URI to import")
    found, value = constant(uri_node)
    if found:
        val = Val.of(value, uri_node.path)
    elif "runtimeParameter" in uri_node.as_mapping(optional=False):
        pname = uri_node.get("runtimeParameter").name("an input parameter name")
        val = p_in.get(pname, Val.why(f"importer parameter '{pname}' is not bound by the task"))
    else:
        raise uri_node.expected("'constant' or 'runtimeParameter'")
    if val.known:
        for uri, origin in val.options:
            ctx.b.use_location(None, uri, origin)
    else:
        ctx.b.note(uri_node.path, f"importer URI unknown: {val.unknown}", key)
        val = Val.why(f"importer '{key}' URI unknown: {val.unknown}")
    names = [n for n, _ in comp.get("outputDefinitions").get("artifacts").items()] or ["artifact"]
    for name in names:
        outputs[(local, name)] = val


def _consume_inputs(b: GraphBuilder, key: str, inputs: Node, p_in: dict[str, Val], a_in: dict[str, Val]) -> None:
    for name, val in p_in.items():
        b.use_value(key, val, f"{inputs.path}.parameters.{name}", name)
    for name, val in a_in.items():
        b.use_value(key, val, f"{inputs.path}.artifacts.{name}", name, typed=True)
    b.note_split_location(key, p_in, f"{inputs.path}.parameters")


def _container(b: GraphBuilder, key: str, container: Node, p_in: dict[str, Val]) -> None:
    line = [e.value for e in container.get("command").elements()]
    line += [e.value for e in container.get("args").elements()]
    skip = output_args(line)  # where it writes, not what it reads
    texts = [t for i, t in enumerate(line) if i not in skip]
    texts += [e.get("value").value for e in container.get("env").elements()]
    b.use_text_values(key, texts, container.path)
    count, accel = ir_gpus(b, key, container.get("resources"), p_in)
    if count:
        b.add_gpus(key, count, accel)


def _mark_outputs(comp: Node, local: str, key: str, outputs: Outputs) -> None:
    defs = comp.get("outputDefinitions")
    for name, _ in defs.get("artifacts").items():
        outputs[(local, name)] = Val(produced_by=key)
    for name, _ in defs.get("parameters").items():
        outputs[(local, name)] = Val.why(f"output parameter '{name}' of step '{key}' is known only at run time")
