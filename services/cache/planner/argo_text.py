"""Static substitution of Argo `{{...}}` placeholders."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from gpufair.cache.planner.model import Val

_PLACEHOLDER = re.compile(r"\{\{\s*(=?)\s*([^{}]*?)\s*\}\}")
# KFP launcher placeholders inside an Argo template (SDK 1.x v2-compatible mode).
_KFP_INPUT = re.compile(r"""^\$\.inputs\.(?:parameters\[['"]([^'"]+)['"]\]|artifacts\[['"]([^'"]+)['"]\]\.uri)$""")
_OUTPUT = re.compile(r"^(tasks|steps)\.([^.]+)\.(outputs\.(artifacts|parameters|result)|outputs|ip|status|id|exitCode)")
MAX_COMBINATIONS = 64

Scope = dict[str, Val]


@dataclass(frozen=True)
class Resolved:
    """Renderings of a text (unknown placeholders left verbatim) and what was unknown."""

    options: tuple[tuple[str, str], ...]
    unknowns: tuple[tuple[str, Val], ...]

    def as_val(self) -> Val:
        """One Val: known options, or the first reason something is unknown."""
        for _, val in self.unknowns:
            return val
        return Val(self.options)


def render(value: Any) -> str:
    """A value as Argo substitutes it into text (JSON for lists and maps)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return "" if value is None else str(value)


def lookup(expr: str, scope: Scope) -> Val:
    """What `{{expr}}` stands for, or why it is unknown before the run."""
    if expr in scope:
        return scope[expr]
    m = _KFP_INPUT.match(expr)
    if m:
        key = f"inputs.parameters.{m.group(1)}" if m.group(1) else f"inputs.artifacts.{m.group(2)}"
        if key in scope:
            return scope[key]
    m = _OUTPUT.match(expr)
    if m:
        if m.group(4) == "artifacts":
            return Val(produced_by=m.group(2))
        return Val.why(f"'{{{{{expr}}}}}' is an output of '{m.group(2)}', known only at run time")
    if expr.startswith("inputs.parameters."):
        return Val.why(f"input parameter '{expr[18:]}' gets no value")
    if expr == "item" or expr.startswith("item."):
        return Val.why(f"'{{{{{expr}}}}}' is used outside a loop")
    return Val.why(f"'{{{{{expr}}}}}' is known only at run time")


def resolve(text: str, scope: Scope, origin: str) -> Resolved:
    """Substitute every known placeholder in `text`, all combinations, bounded."""
    combos: list[tuple[str, str]] = [("", origin)]
    unknowns: list[tuple[str, Val]] = []
    pos = 0
    for m in _PLACEHOLDER.finditer(text):
        literal = text[pos:m.start()]
        pos = m.end()
        val = Val.why(f"expression '{m.group(0)}' is evaluated at run time") if m.group(1) else lookup(m.group(2), scope)
        if not val.known or not val.options:
            unknowns.append((m.group(2), val))
            combos = [(c + literal + m.group(0), o) for c, o in combos]
            continue
        nxt = [(c + literal + render(v), vo if o == origin else o) for c, o in combos for v, vo in val.options]
        if len(nxt) > MAX_COMBINATIONS:
            unknowns.append((m.group(2), Val.why(f"more than {MAX_COMBINATIONS} combinations of loop values")))
            combos = [(c + literal + m.group(0), o) for c, o in combos]
            continue
        combos = nxt
    tail = text[pos:]
    return Resolved(tuple((c + tail, o) for c, o in combos), tuple(unknowns))


def resolve_value(value: Any, scope: Scope, origin: str) -> Val:
    """A parameter value: strings are substituted, other scalars kept."""
    if isinstance(value, str):
        return resolve(value, scope, origin).as_val()
    return Val.of(value, origin)
