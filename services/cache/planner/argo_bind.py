"""Argo loops (withItems/withParam/withSequence) and argument binding."""

from __future__ import annotations

import json
from typing import Any

from gpufair.cache.planner.argo_artifacts import artifact_source
from gpufair.cache.planner.argo_text import Scope, resolve, resolve_value
from gpufair.cache.planner.doc import Node
from gpufair.cache.planner.model import Val

MAX_LOOP_ITEMS = 256


def _item_scope(scope: Scope, item: Any, origin: str) -> Scope:
    """`scope` plus a loop item; placeholders inside the item (a workflow
    parameter, another task's output) are filled in from `scope`, as Argo
    does before it expands the loop."""
    out = dict(scope)
    if isinstance(item, dict):
        fields = {k: resolve_value(v, scope, origin) for k, v in item.items()}
        for k, val in fields.items():
            out[f"item.{k}"] = val
        unknown = next((v for v in fields.values() if not v.known or len(v.options) != 1), None)
        out["item"] = unknown if unknown is not None else \
            Val.of({k: v.options[0][0] for k, v in fields.items()}, origin)
    else:
        out["item"] = resolve_value(item, scope, origin)
    return out


def _sequence(seq: Node, scope: Scope) -> list[Any] | None:
    def num(node: Node) -> int | None:
        raw = node.text()
        if raw is None:
            return None
        val = resolve(raw, scope, node.path).as_val()
        try:
            return int(str(val.options[0][0])) if val.known and val.options else None
        except ValueError:
            raise node.error(f"expected an integer, got {raw!r}") from None
    count, start, end = num(seq.get("count")), num(seq.get("start")) or 0, num(seq.get("end"))
    if count is not None:
        end = start + count - 1
    if end is None:
        return None
    step = 1 if end >= start else -1
    return list(range(start, end + step, step))[:MAX_LOOP_ITEMS]


def loop_scopes(task: Node, scope: Scope) -> tuple[list[Scope], str | None]:
    """One caller scope per loop item (just `scope` for no loop), and a description."""
    items_node = task.get("withItems")
    if not items_node.missing:
        items = items_node.as_list(optional=False)
        scopes = [_item_scope(scope, it, f"{items_node.path}[{i}]") for i, it in enumerate(items[:MAX_LOOP_ITEMS])]
        return scopes or [scope], f"withItems ({len(items)} items)"
    param = task.get("withParam")
    if not param.missing:
        raw = param.text() or ""
        val = resolve(raw, scope, param.path).as_val()
        items = None
        if val.known and len(val.options) == 1:
            value = val.options[0][0]
            try:
                items = json.loads(value) if isinstance(value, str) else value
            except ValueError:
                items = None
        if not isinstance(items, list):
            unknown = dict(scope)
            unknown["item"] = Val.why(f"loop items come from '{raw}' at run time")
            return [unknown], "withParam (items known at run time)"
        return [_item_scope(scope, it, param.path) for it in items[:MAX_LOOP_ITEMS]] or [scope], \
            f"withParam ({len(items)} items)"
    seq = task.get("withSequence")
    if not seq.missing:
        numbers = _sequence(seq, scope)
        if numbers is None:
            unknown = dict(scope)
            unknown["item"] = Val.why("sequence bounds are known only at run time")
            return [unknown], "withSequence (bounds known at run time)"
        return [_item_scope(scope, n, seq.path) for n in numbers] or [scope], f"withSequence ({len(numbers)} items)"
    return [scope], None


def _merge(vals: list[Val]) -> Val:
    for val in vals:
        if not val.known:
            return val
    options: dict[tuple[str, str], tuple[Any, str]] = {}
    for val in vals:
        for value, origin in val.options:
            options.setdefault((json.dumps(value, sort_keys=True, default=str), origin), (value, origin))
    return Val(tuple(options.values()))


def bind(task: Node, tmpl: Node, wf: Scope, scopes: list[Scope], repo: str) -> tuple[Scope, dict[str, str]]:
    """The callee's scope: workflow parameters plus its bound inputs.

    Returns the scope and the S3 endpoints seen for artifact URIs.
    """
    args = task.get("arguments")
    given_p = {p.require("name").name("a parameter name"): p for p in args.get("parameters").elements()}
    given_a = {a.require("name").name("an artifact name"): a for a in args.get("artifacts").elements()}
    child: Scope = {k: v for k, v in wf.items() if k.startswith("workflow.")}
    endpoints: dict[str, str] = {}
    inputs = tmpl.get("inputs")
    tname = tmpl.get("name").text() or "inline"
    for p in inputs.get("parameters").elements():
        name = p.require("name").name("a parameter name")
        if name in given_p:
            value = given_p[name].get("value")
            if value.missing:
                child[f"inputs.parameters.{name}"] = Val.why(f"argument '{name}' has no value")
            else:
                child[f"inputs.parameters.{name}"] = _merge(
                    [resolve_value(value.value, s, value.path) for s in scopes])
        elif "value" in p.as_mapping():
            child[f"inputs.parameters.{name}"] = resolve_value(p.get("value").value, wf, p.get("value").path)
        elif "default" in p.as_mapping():
            child[f"inputs.parameters.{name}"] = resolve_value(p.get("default").value, wf, p.get("default").path)
        else:
            child[f"inputs.parameters.{name}"] = Val.why(
                f"input parameter '{name}' of template '{tname}' gets no value")
    for a in inputs.get("artifacts").elements():
        name = a.require("name").name("an artifact name")
        source = given_a.get(name, a)
        vals = []
        for s in scopes:
            val, endpoint = artifact_source(source, s, repo)
            vals.append(val)
            for value, _ in val.options:
                if endpoint and isinstance(value, str):
                    endpoints[value] = endpoint
        child[f"inputs.artifacts.{name}"] = _merge(vals)
    return child, endpoints
