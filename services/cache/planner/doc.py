"""Typed, path-aware access to a loaded YAML document.

Every lookup knows its path (`spec.templates[3].dag.tasks[0]`), so a wrong
type becomes a PipelineError that says where and what was expected, with the
line and column of the nearest mapping or sequence.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gpufair.cache.planner.errors import PipelineError


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    return {dict: "mapping", list: "list", str: "string", bool: "boolean"}.get(
        type(value), type(value).__name__
    )


@dataclass(frozen=True)
class DocContext:
    """The source name and the positions recorded by the loader."""

    source: str
    marks: dict[int, tuple[int, int]] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Node:
    """A value inside a document plus the path that reached it."""

    value: Any
    path: str
    ctx: DocContext
    anchor: Any = None  # nearest container, for line/column in errors

    def error(self, problem: str) -> PipelineError:
        """An error located at this node."""
        probe = self.value if isinstance(self.value, (dict, list)) else self.anchor
        line, col = self.ctx.marks.get(id(probe), (None, None))
        return PipelineError(self.ctx.source, self.path, problem, line, col)

    def expected(self, what: str) -> PipelineError:
        return self.error(f"expected {what}, got {_type_name(self.value)}")

    def _child(self, key: object, value: Any) -> Node:
        if isinstance(key, int):
            path = f"{self.path}[{key}]"
        else:
            path = f"{self.path}.{key}" if self.path else str(key)
        anchor = self.value if isinstance(self.value, (dict, list)) else self.anchor
        return Node(value, path, self.ctx, anchor)

    @property
    def missing(self) -> bool:
        return self.value is None

    def get(self, key: str) -> Node:
        """The child at `key` of a mapping (a null node when absent)."""
        mapping = self.as_mapping()
        return self._child(key, mapping.get(key))

    def require(self, key: str, what: str = "a value") -> Node:
        child = self.get(key)
        if child.missing:
            raise self.error(f"missing required field '{key}' ({what})")
        return child

    def as_mapping(self, optional: bool = True) -> dict[str, Any]:
        if self.value is None and optional:
            return {}
        if not isinstance(self.value, dict):
            raise self.expected("a mapping")
        return self.value

    def as_list(self, optional: bool = True) -> list[Any]:
        if self.value is None and optional:
            return []
        if not isinstance(self.value, list):
            raise self.expected("a list")
        return self.value

    def items(self) -> Iterator[tuple[str, Node]]:
        """(key, child) pairs of a mapping; keys must be strings."""
        for key, value in self.as_mapping().items():
            if not isinstance(key, str):
                raise self.error(f"expected string keys, got {_type_name(key)} key {key!r}")
            yield key, self._child(key, value)

    def elements(self) -> Iterator[Node]:
        for i, value in enumerate(self.as_list()):
            yield self._child(i, value)

    def text(self, default: str | None = None, what: str = "a string") -> str | None:
        """A scalar as a string: numbers and booleans are accepted as text."""
        if self.value is None:
            return default
        if isinstance(self.value, bool):
            return "true" if self.value else "false"
        if isinstance(self.value, (str, int, float)):
            return str(self.value)
        raise self.expected(what)

    def name(self, what: str = "a name") -> str:
        """A required non-empty string."""
        value = self.text(what=what)
        if not value:
            raise self.error(f"expected {what}, got {_type_name(self.value) if self.value is None else 'an empty string'}")
        return value


def root_node(data: Any, source: str, marks: dict[int, tuple[int, int]]) -> Node:
    """A node for a whole document."""
    return Node(data, "", DocContext(source, marks), data)
