"""Static evaluation of KFP v2 IR task inputs: constants, channels, loops."""

from __future__ import annotations

import json
import re
from typing import Any

from gpufair.cache.planner.doc import Node
from gpufair.cache.planner.model import Val

MAX_LOOP_ITEMS = 256
_SELECTOR = re.compile(r'^parseJson\(string_value\)((?:\[(?:"[^"]*"|\'[^\']*\'|\d+)\])+)$')
_INDEX = re.compile(r'\[("([^"]*)"|\'([^\']*)\'|(\d+))\]')

Outputs = dict[tuple[str, str], Val]


_WRAPPED = frozenset({"stringValue", "intValue", "doubleValue", "numberValue", "boolValue",
                      "structValue", "listValue"})


def run_parameters(values: Any, legacy: Any) -> dict[str, Any]:
    """A run's parameter values from its runtime config: `parameterValues`
    (KFP 2) as they are, else the older `parameters` map, whose entries wrap
    each value in a one-key map such as {"stringValue": "gs://..."}."""
    if isinstance(values, dict) and values:
        return dict(values)
    if not isinstance(legacy, dict):
        return {}
    return {name: next(iter(v.values())) if isinstance(v, dict) and len(v) == 1
            and next(iter(v)) in _WRAPPED else v for name, v in legacy.items()}


def constant(spec: Node) -> tuple[bool, Any]:
    """(found, value) of `constant: x` or the older `constantValue: {stringValue: x}`."""
    if "constant" in spec.as_mapping():
        return True, spec.get("constant").value
    wrapped = spec.get("constantValue")
    if not wrapped.missing:
        for key in ("stringValue", "intValue", "doubleValue", "boolValue"):
            if key in wrapped.as_mapping():
                return True, wrapped.get(key).value
        raise wrapped.expected("a mapping with stringValue, intValue or doubleValue")
    return False, None


def param_value(spec: Node, params: dict[str, Val], outputs: Outputs) -> Val:
    """What a task input parameter is bound to, as far as the file tells."""
    if not isinstance(spec.value, dict):
        raise spec.expected("a parameter binding mapping")
    runtime = spec.get("runtimeValue")
    val: Val
    if not runtime.missing:
        found, value = constant(runtime)
        val = Val.of(value, runtime.path) if found else Val.why(f"{runtime.path}: no constant value")
    elif "componentInputParameter" in spec.value:
        name = spec.get("componentInputParameter").name("an input parameter name")
        val = params.get(name, Val.why(f"component input parameter '{name}' is not bound"))
    elif "taskOutputParameter" in spec.value:
        out = spec.get("taskOutputParameter")
        producer = out.require("producerTask").name("a task name")
        key = out.require("outputParameterKey").name("an output name")
        val = outputs.get((producer, key)) or Val.why(
            f"output parameter '{key}' of task '{producer}' is known only at run time"
        )
    elif "taskFinalStatus" in spec.value:
        val = Val.why("the final status of a task is known only at run time")
    else:
        val = Val.why(f"{spec.path}: unrecognised parameter source")
    selector = spec.get("parameterExpressionSelector").text()
    return select(val, selector) if selector else val


def select(val: Val, selector: str) -> Val:
    """Apply a `parseJson(string_value)["a"][0]` selector to every option."""
    if not val.known:
        return val
    m = _SELECTOR.match(selector.strip())
    if not m:
        return Val.why(f"value is transformed at run time by '{selector}'")
    keys = [g2 if g2 is not None else g3 if g3 is not None else int(g4)
            for _, g2, g3, g4 in _INDEX.findall(m.group(1))]
    options = []
    for value, origin in val.options:
        try:
            item = json.loads(value) if isinstance(value, str) else value
            for key in keys:
                item = item[key]
        except (ValueError, TypeError, KeyError, IndexError):
            return Val.why(f"selector '{selector}' does not apply to {value!r}")
        options.append((item, origin))
    return Val(tuple(options))


def artifact_value(spec: Node, arts: dict[str, Val], outputs: Outputs) -> Val:
    """What a task input artifact is bound to: an importer's URI or an output."""
    if not isinstance(spec.value, dict):
        raise spec.expected("an artifact binding mapping")
    if "taskOutputArtifact" in spec.value:
        out = spec.get("taskOutputArtifact")
        producer = out.require("producerTask").name("a task name")
        key = out.require("outputArtifactKey").name("an output name")
        return outputs.get((producer, key)) or Val(produced_by=producer)
    if "componentInputArtifact" in spec.value:
        name = spec.get("componentInputArtifact").name("an input artifact name")
        return arts.get(name, Val.why(f"component input artifact '{name}' is not bound"))
    return Val.why(f"{spec.path}: artifact source not known before the run")


def _items(task: Node, items: Node, p_in: dict[str, Val]) -> Val:
    if "raw" in items.as_mapping():
        raw = items.get("raw")
        try:
            value = json.loads(raw.value) if isinstance(raw.value, str) else raw.value
        except ValueError:
            raise raw.error("expected a JSON list of loop items") from None
        return Val.of(value, raw.path)
    name = items.get("inputParameter").text()
    if name:
        return p_in.get(name, Val.why(f"loop items '{name}' are not bound"))
    raise items.error("expected 'raw' or 'inputParameter'")


def loop_binding(task: Node, p_in: dict[str, Val], a_in: dict[str, Val]) -> str | None:
    """Bind a loop's item input in place; return a description of the loop."""
    it = task.get("parameterIterator")
    if not it.missing:
        item_input = it.require("itemInput").name("the loop item input name")
        source = _items(task, it.require("items"), p_in)
        if not source.known:
            p_in[item_input] = Val.why(f"loop items: {source.unknown or 'produced at run time'}")
            return "loop over items known at run time"
        options: list[tuple[Any, str]] = []
        for value, origin in source.options:
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except ValueError:
                    value = [value]
            seq = value if isinstance(value, list) else [value]
            options.extend((item, origin) for item in seq[:MAX_LOOP_ITEMS])
        p_in[item_input] = Val(tuple(options))
        return f"loop over {len(options)} items"
    it = task.get("artifactIterator")
    if not it.missing:
        item_input = it.require("itemInput").name("the loop item input name")
        name = it.require("items").require("inputArtifact").name("an input artifact name")
        a_in[item_input] = a_in.get(name, Val.why(f"loop artifacts '{name}' are not bound"))
        return "loop over artifacts"
    return None
