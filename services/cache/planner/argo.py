"""Argo Workflow (KFP v1, hand-written, or KFP v2 compiled) to a Pipeline."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gpufair.cache.planner.argo_artifacts import artifact_source
from gpufair.cache.planner.argo_bind import bind, loop_scopes
from gpufair.cache.planner.argo_leaf import containers, scan_leaf
from gpufair.cache.planner.argo_text import Scope, resolve
from gpufair.cache.planner.dagutil import expand, sinks, topo_order
from gpufair.cache.planner.doc import Node
from gpufair.cache.planner.graph import GraphBuilder, says_not_data
from gpufair.cache.planner.model import CONTAINER, DAG, EXTERNAL, OTHER, RESOURCE, Pipeline, Step, Val

FORMAT = "argo-workflow"
SUPPORTED_KINDS = ("Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate", "CronWorkflow")
MAX_NESTING = 32
_DEP_TOKEN = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_-]*)(?:\.[A-Za-z]+)?")
_LEAF_KINDS = {"container": CONTAINER, "script": CONTAINER, "containerSet": CONTAINER, "resource": RESOURCE}


def parse_argo(doc: Node, overrides: dict[str, Any]) -> Pipeline:
    """Flatten an Argo Workflow (or template / cron workflow) from its entrypoint."""
    api = doc.get("apiVersion")
    if api.text() != "argoproj.io/v1alpha1":
        raise api.error(f"unsupported apiVersion '{api.text()}': expected argoproj.io/v1alpha1")
    kind = doc.get("kind")
    if kind.text() not in SUPPORTED_KINDS:
        what = "missing field 'kind'" if kind.missing else f"unsupported kind '{kind.text()}'"
        raise kind.error(f"{what}: expected one of {', '.join(SUPPORTED_KINDS)}")
    spec = doc.require("spec", "the workflow spec")
    if kind.text() == "CronWorkflow":
        spec = spec.require("workflowSpec", "the workflow spec of the cron workflow")
    from gpufair.cache.planner.argo_kfp2 import is_kfp_v2, parse_kfp_v2_argo

    if is_kfp_v2(spec):
        return parse_kfp_v2_argo(doc, spec, overrides)
    return _Walker(doc, spec, overrides).run()


@dataclass
class _Walker:
    doc: Node
    spec: Node
    overrides: dict[str, Any]
    b: GraphBuilder = field(default_factory=GraphBuilder)
    endpoints: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.templates: dict[str, Node] = {}
        for tmpl in self.spec.get("templates").elements():
            name = tmpl.require("name", "the template name").name("a template name")
            if name in self.templates:
                raise tmpl.error(f"duplicate template name '{name}'")
            self.templates[name] = tmpl
        ref = self.spec.get("artifactRepositoryRef")
        self.repo = (
            f"artifact repository configMap '{ref.get('configMap').text() or 'artifact-repositories'}'"
            f" key '{ref.get('key').text() or 'default'}'" if not ref.missing
            else "the cluster's default artifact repository"
        )
        self._expanding: list[str] = []  # group templates being expanded, outermost first
        self._spec_volumes = _by_name(self.spec.get("volumes"))

    def run(self) -> Pipeline:
        if "system-container-driver" in self.templates:
            # The KFP backend's own compilation (KFP >= 2.5): drivers fetch each
            # task's spec from the API server at run time, so no command,
            # input or dataset of a task is in this file.
            self.b.note("spec.templates", "a KFP backend workflow: its tasks' commands and inputs "
                        "are not in this file; plan the pipeline's compiled IR YAML instead")
        wf = self._workflow_params()
        for art in self.spec.get("arguments").get("artifacts").elements():
            val, endpoint = artifact_source(art, wf, self.repo)
            wf["workflow.artifacts." + (art.get("name").text() or "")] = val
            self._declare(val, endpoint)
        entry_node = self.spec.get("entrypoint")
        if entry_node.missing:
            ref = self.spec.get("workflowTemplateRef")
            why = "" if ref.missing else " (workflowTemplateRef is not followed offline)"
            raise self.spec.error(f"missing required field 'entrypoint'{why}")
        entry = entry_node.name("a template name")
        tmpl = self._template(entry, entry_node)
        scope = _entry_inputs(tmpl, wf, self._bind(Node({}, entry_node.path, entry_node.ctx), tmpl, wf, [wf]))
        if _group_kind(tmpl):
            self._expanding.append(entry)
            ends = self._group(tmpl, "", scope, None, (), 0)
            self._expanding.pop()
        else:
            self._leaf(tmpl, entry, scope, None, (), tmpl, None, None)
            ends = (entry,)
        exit_node = self.spec.get("onExit")
        if exit_node.text():
            # The exit handler (KFP's dsl.ExitHandler) runs once the workflow ends,
            # whether it succeeded or not; Argo names its node `onExit`.
            task = Node({"template": exit_node.text(), "when": "the workflow has ended"},
                        exit_node.path, exit_node.ctx)
            self._call(task, "onExit", wf, None, ends, 0)
        name = self.doc.get("metadata").get("name").text() or (
            self.doc.get("metadata").get("generateName").text() or self.doc.ctx.source).rstrip("-")
        shown = {k[len("workflow.parameters."):]: (v.options[0][0] if v.known and v.options else None)
                 for k, v in wf.items() if k.startswith("workflow.parameters.")}
        return self.b.build(name, FORMAT, self.doc.ctx.source, shown)

    def _workflow_params(self) -> Scope:
        wf: Scope = {}
        for p in self.spec.get("arguments").get("parameters").elements():
            name = p.require("name").name("a parameter name")
            if name in self.overrides:
                wf[f"workflow.parameters.{name}"] = Val.of(self.overrides[name], f"--param {name}")
            elif "value" in p.as_mapping():
                wf[f"workflow.parameters.{name}"] = Val.of(p.get("value").value, p.get("value").path)
            elif not p.get("valueFrom").missing:
                wf[f"workflow.parameters.{name}"] = Val.why(f"workflow parameter '{name}' comes from valueFrom at run time")
            else:
                wf[f"workflow.parameters.{name}"] = Val.why(
                    f"workflow parameter '{name}' has no value; pass one with --param {name}=...")
        for name, value in self.overrides.items():
            wf.setdefault(f"workflow.parameters.{name}", Val.of(value, f"--param {name}"))
        for name, val in wf.items():
            if not says_not_data(name.rsplit(".", 1)[-1]):  # an output root is no dataset
                self._declare(val, None)
        return wf

    def _declare(self, val: Val, endpoint: str | None) -> None:
        for value, origin in val.options:
            self.b.use_text_values(None, value, origin)
            if endpoint and isinstance(value, str):
                self.endpoints[value] = endpoint

    def _template(self, name: str, at: Node) -> Node:
        if name not in self.templates:
            raise at.error(f"unknown template '{name}'")
        return self.templates[name]

    def _data_volumes(self, tmpl: Node, scope: Scope) -> dict[str, Val]:
        """Volume name -> the data volume's URI (`pvc://claim`, `nfs://server/path`,
        `azurefile://share`), or why that is known only at run time (KFP v1
        VolumeOp: a claim the pipeline creates itself), for the volumes the
        template's containers mount (the template's own, else the workflow's)."""
        own = _by_name(tmpl.get("volumes"))
        out = {}
        for c in containers(tmpl):
            for mount in c.get("volumeMounts").elements():
                name = mount.get("name").text() or ""
                vol = own.get(name) or self._spec_volumes.get(name)
                if vol is not None and name not in out:
                    val = _volume_uri(vol, scope)
                    if val is not None:
                        out[name] = val
        return out

    # -- groups -------------------------------------------------------------

    def _group(self, tmpl: Node, prefix: str, scope: Scope, parent: str | None,
               entry: tuple[str, ...], depth: int) -> tuple[str, ...]:
        if depth > MAX_NESTING:
            raise tmpl.error(f"templates nested deeper than {MAX_NESTING} levels (recursive template?)")
        if not tmpl.get("dag").missing:
            return self._dag(tmpl.get("dag"), prefix, scope, parent, entry, depth)
        prev, any_step = entry, False
        for group in tmpl.get("steps").elements():
            items = list(group.elements()) if isinstance(group.value, list) else [group]
            exits: dict[str, None] = {}
            for step in items:
                name = step.require("name").name("a step name")
                exits.update(dict.fromkeys(self._call(step, prefix + name, scope, parent, prev, depth)))
                any_step = True
            prev = tuple(exits) or prev
        return prev if any_step else ()

    def _dag(self, dag: Node, prefix: str, scope: Scope, parent: str | None,
             entry: tuple[str, ...], depth: int) -> tuple[str, ...]:
        tasks_node = dag.get("tasks")
        tasks: dict[str, Node] = {}
        for task in tasks_node.elements():
            name = task.require("name").name("a task name")
            if name in tasks:
                raise task.error(f"duplicate task name '{name}'")
            tasks[name] = task
        deps = {name: _task_deps(name, task, tasks) for name, task in tasks.items()}
        exits: dict[str, tuple[str, ...]] = {}
        for name in topo_order(list(tasks), deps, tasks_node):
            waits = expand(deps[name], exits, entry)
            exits[name] = self._call(tasks[name], prefix + name, scope, parent, waits, depth)
        return expand(sinks(list(tasks), deps), exits, ())

    def _call(self, task: Node, key: str, scope: Scope, parent: str | None,
              waits: tuple[str, ...], depth: int) -> tuple[str, ...]:
        """Instantiate the template a DAG task or step runs; return its exits."""
        condition = task.get("when").text()
        if not task.get("templateRef").missing:
            ref = task.get("templateRef")
            label = f"{ref.get('name').text()}/{ref.get('template').text()}"
            self.b.add_step(task, Step(key, EXTERNAL, label, waits, condition=condition, parent=parent))
            self.b.note(ref.path, f"template '{label}' lives in a WorkflowTemplate outside this file", key)
            return (key,)
        if not task.get("inline").missing:
            tmpl = task.get("inline")
        else:
            ref_node = task.require("template", "the template it runs")
            tmpl = self._template(ref_node.name("a template name"), ref_node)
        scopes, loop = self._loop_scopes(task, scope)
        child = self._bind(task, tmpl, scope, scopes)
        if _group_kind(tmpl):
            name = tmpl.get("name").text() or key
            self.b.add_step(task, Step(key, DAG, name, waits,
                                       condition=condition, loop=loop, parent=parent))
            if name in self._expanding:
                # KFP v1 recursion: a group calls itself until a `when` stops it
                # at run time. Its steps are planned once, at the outer call.
                self.b.note(task.path, f"template '{name}' calls itself again (recursion, "
                                       "repeated at run time): its steps are planned once", key)
                return (key,)
            self._expanding.append(name)
            try:
                return self._group(tmpl, key + "/", child, key, (key,), depth + 1) or (key,)
            finally:
                self._expanding.pop()
        self._leaf(tmpl, key, child, parent, waits, task, condition, loop)
        return (key,)

    def _loop_scopes(self, task: Node, scope: Scope) -> tuple[list[Scope], str | None]:
        return loop_scopes(task, scope)

    def _bind(self, task: Node, tmpl: Node, scope: Scope, scopes: list[Scope]) -> Scope:
        wf = {k: v for k, v in scope.items() if k.startswith("workflow.")}
        child, endpoints = bind(task, tmpl, wf, scopes, self.repo)
        self.endpoints.update(endpoints)
        return child

    def _leaf(self, tmpl: Node, key: str, scope: Scope, parent: str | None, waits: tuple[str, ...],
              at: Node, condition: str | None, loop: str | None) -> None:
        kind = next((k for f, k in _LEAF_KINDS.items() if not tmpl.get(f).missing), OTHER)
        self.b.add_step(at, Step(key, kind, tmpl.get("name").text() or key, waits,
                                 condition=condition, loop=loop, parent=parent))
        scan_leaf(self.b, key, tmpl, scope, self.endpoints, self._data_volumes(tmpl, scope), self.spec)


def _by_name(volumes: Node) -> dict[str, Node]:
    return {v.get("name").text() or "": v for v in volumes.elements()}


def _volume_uri(vol: Node, scope: Scope) -> Val | None:
    claim = vol.get("persistentVolumeClaim").get("claimName")
    nfs, share = vol.get("nfs"), vol.get("azureFile").get("shareName")
    if claim.text():
        val = resolve(claim.text(), scope, claim.path).as_val()
        return Val(tuple((f"pvc://{c}", o) for c, o in val.options)) if val.known else val
    if nfs.get("server").text():
        return Val.of(f"nfs://{nfs.get('server').text()}{nfs.get('path').text() or '/'}", nfs.path)
    if share.text():
        return Val.of(f"azurefile://{share.text()}", share.path)
    return None


def _entry_inputs(tmpl: Node, wf: Scope, scope: Scope) -> Scope:
    """The entrypoint's scope: Argo passes the workflow's arguments to the
    entrypoint template's inputs of the same names (KFP v1 reads every
    pipeline parameter this way), except where an input fixes its `value`."""
    out = dict(scope)
    for p in tmpl.get("inputs").get("parameters").elements():
        name = p.get("name").text() or ""
        if f"workflow.parameters.{name}" in wf and "value" not in p.as_mapping():
            out[f"inputs.parameters.{name}"] = wf[f"workflow.parameters.{name}"]
    for a in tmpl.get("inputs").get("artifacts").elements():
        name = a.get("name").text() or ""
        if f"workflow.artifacts.{name}" in wf:
            out[f"inputs.artifacts.{name}"] = wf[f"workflow.artifacts.{name}"]
    return out


def _group_kind(tmpl: Node) -> bool:
    return not tmpl.get("dag").missing or not tmpl.get("steps").missing


def _task_deps(name: str, task: Node, tasks: dict[str, Node]) -> list[str]:
    """Sibling names from `dependencies` or the `depends` expression."""
    out: list[str] = []
    for dep in task.get("dependencies").elements():
        out.append(dep.name("a task name"))
    depends = task.get("depends")
    if not depends.missing:
        expr = depends.text() or ""
        out += [m.group(1) for m in _DEP_TOKEN.finditer(expr)]
    for dep in out:
        if dep not in tasks:
            at = depends if not depends.missing else task.get("dependencies")
            raise at.error(f"task '{name}' depends on unknown task '{dep}'")
        if dep == name:
            raise task.error(f"task '{name}' depends on itself")
    return list(dict.fromkeys(out))
