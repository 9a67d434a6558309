"""Safe, bounded YAML loading: no tags, no alias bombs, no deep nesting.

PyYAML's safe loader builds aliases as shared objects, so a "billion laughs"
document is small in memory but explodes for anything that walks it. We scan
the event stream first (in C when libyaml is there) and count every node as
if aliases were expanded, refuse recursive aliases, and bound depth and the
number of documents. Only then is the text constructed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpufair.cache.planner.errors import PipelineError
from gpufair.cache.planner.package import unpack

logger = logging.getLogger(__name__)

_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class LoadLimits:
    """Bounds on what a pipeline file may hold (defaults fit real pipelines)."""

    max_bytes: int = 8 * 1024 * 1024
    max_depth: int = 100
    max_expanded_nodes: int = 500_000
    max_aliases: int = 10_000
    max_documents: int = 16


@dataclass(frozen=True)
class LoadedDoc:
    """One YAML document and where its mappings/sequences start (1-based)."""

    data: Any
    index: int
    marks: dict[int, tuple[int, int]] = field(default_factory=dict, compare=False)


class _MarkingLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    """Safe loader that remembers the position of each mapping and sequence."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.marks: dict[int, tuple[int, int]] = {}

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        obj = super().construct_object(node, deep)
        if isinstance(obj, (dict, list)):
            mark = node.start_mark
            self.marks[id(obj)] = (mark.line + 1, mark.column + 1)
        return obj


def _yaml_error(source: str, exc: Exception) -> PipelineError:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    line = mark.line + 1 if mark is not None else None
    column = mark.column + 1 if mark is not None else None
    return PipelineError(source, "", f"invalid YAML: {problem}", line, column)


class _Budget:
    """Counts nodes as if aliases were expanded while the events stream by."""

    def __init__(self, source: str, limits: LoadLimits) -> None:
        self.source, self.limits = source, limits
        self.expanded = 0
        self.aliases = 0
        self.documents = 0
        self.anchors: dict[str, int] = {}
        self.open: list[tuple[str | None, int]] = []  # (anchor, expanded at start)

    def _fail(self, event: yaml.Event, problem: str) -> PipelineError:
        mark = event.start_mark
        line = mark.line + 1 if mark is not None else None
        column = mark.column + 1 if mark is not None else None
        return PipelineError(self.source, "", problem, line, column)

    def _add(self, event: yaml.Event, n: int) -> None:
        self.expanded += n
        if self.expanded > self.limits.max_expanded_nodes:
            raise self._fail(
                event,
                f"document too large: more than {self.limits.max_expanded_nodes} "
                "nodes once aliases are expanded (alias bomb?)",
            )

    def feed(self, event: yaml.Event) -> None:
        if isinstance(event, yaml.DocumentStartEvent):
            self.documents += 1
            self.anchors.clear()  # anchors do not cross documents
            if self.documents > self.limits.max_documents:
                raise self._fail(event, f"more than {self.limits.max_documents} YAML documents")
        elif isinstance(event, yaml.AliasEvent):
            self._alias(event)
        elif isinstance(event, yaml.ScalarEvent):
            self._add(event, 1)
            if event.anchor:
                self.anchors[event.anchor] = 1
        elif isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            self.open.append((event.anchor, self.expanded))
            self._add(event, 1)
            if len(self.open) > self.limits.max_depth:
                raise self._fail(event, f"nesting deeper than {self.limits.max_depth} levels")
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            anchor, start = self.open.pop()
            if anchor:
                self.anchors[anchor] = self.expanded - start

    def _alias(self, event: yaml.AliasEvent) -> None:
        self.aliases += 1
        if self.aliases > self.limits.max_aliases:
            raise self._fail(event, f"more than {self.limits.max_aliases} aliases")
        if any(anchor == event.anchor for anchor, _ in self.open):
            raise self._fail(event, f"recursive alias *{event.anchor} is not allowed")
        # An undefined alias is reported by the composer with its position.
        self._add(event, self.anchors.get(event.anchor or "", 1))


def _prescan(text: str, source: str, limits: LoadLimits) -> None:
    budget = _Budget(source, limits)
    for event in yaml.parse(text, Loader=_BaseLoader):
        budget.feed(event)


def load_documents(
    text: str | bytes, source: str, limits: LoadLimits | None = None
) -> list[LoadedDoc]:
    """Parse every YAML document in `text` safely; raise PipelineError if bad."""
    limits = limits or LoadLimits()
    if isinstance(text, bytes):
        if len(text) > limits.max_bytes:
            raise PipelineError(source, "", f"file larger than {limits.max_bytes} bytes")
        text, source = unpack(text, source, limits.max_bytes)
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PipelineError(source, "", f"not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    if not isinstance(text, str):
        raise PipelineError(source, "", f"expected YAML text, got {type(text).__name__}")
    if len(text) > limits.max_bytes or len(text.encode("utf-8", "surrogatepass")) > limits.max_bytes:
        raise PipelineError(source, "", f"file larger than {limits.max_bytes} bytes")
    try:
        _prescan(text, source, limits)
        return _construct(text)
    except PipelineError:
        raise
    except yaml.YAMLError as exc:
        raise _yaml_error(source, exc) from None
    except (ValueError, TypeError, OverflowError, RecursionError, MemoryError) as exc:
        # e.g. an integer with more digits than Python converts, a bad date.
        raise PipelineError(source, "", f"invalid YAML value: {exc}") from None


def _construct(text: str) -> list[LoadedDoc]:
    loader = _MarkingLoader(text)
    docs: list[LoadedDoc] = []
    try:
        while loader.check_data():
            data = loader.get_data()
            docs.append(LoadedDoc(data, len(docs), dict(loader.marks)))
            loader.marks.clear()
    finally:
        loader.dispose()
    return docs
