"""Collects steps, dataset uses and unresolved notes while a parser walks."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from gpufair.cache.planner.doc import Node
from gpufair.cache.planner.model import Dataset, Pipeline, Step, Unresolved, Val
from gpufair.cache.planner.uris import classify, says_not_data, scheme_of, strings_in, uris_in_text

#: Parameter names that probably carry a dataset location, unless
#: `says_not_data` (uris.py) says they are where a step writes.
_DATA_NAME = re.compile(r"uri|url|path|data|bucket|source|src|prefix|dir|file", re.I)
_FLAG = re.compile(r"^--?([A-Za-z][\w.-]*)(=)?", re.S)

_BUCKET_NAME = re.compile(r"bucket", re.I)
_KEY_NAME = re.compile(r"object|key|prefix|file|path|blob", re.I)

DEFAULT_MAX_STEPS = 5_000


def looks_like_data(name: str) -> bool:
    """True if a parameter called `name` probably holds a dataset location."""
    return bool(_DATA_NAME.search(name)) and not says_not_data(name)


def output_args(args: Sequence[object]) -> set[int]:
    """Positions in a command line that hold where the step writes: the value
    of a flag whose name says so (`--output DIR`, `--job-dir=DIR`,
    `--pipeline_root ROOT`). Prefetching those would fetch a step's outputs."""
    out: set[int] = set()
    for i, arg in enumerate(args):
        m = _FLAG.match(arg) if isinstance(arg, str) else None
        if m and says_not_data(m.group(1)):
            out.add(i if m.group(2) else i + 1)
    return out


@dataclass
class _DatasetDraft:
    consumers: dict[str, None] = field(default_factory=dict)
    origins: dict[str, None] = field(default_factory=dict)
    endpoint: str | None = None


@dataclass
class _StepDraft:
    step: Step
    datasets: dict[str, None] = field(default_factory=dict)
    hints: dict[str, None] = field(default_factory=dict)
    gpus: int = 0
    accelerator: str | None = None


class GraphBuilder:
    """Mutable accumulator owned by one parse; `build()` freezes it."""

    def __init__(self, max_steps: int = DEFAULT_MAX_STEPS) -> None:
        self.max_steps = max_steps
        self._steps: dict[str, _StepDraft] = {}
        self._datasets: dict[str, _DatasetDraft] = {}
        self._unresolved: dict[tuple[str | None, str, str], None] = {}

    def add_step(self, at: Node, step: Step) -> None:
        """Add a step after all of its dependencies (keeps dependency order)."""
        if step.name in self._steps:
            raise at.error(f"duplicate step name '{step.name}'")
        if len(self._steps) >= self.max_steps:
            raise at.error(f"more than {self.max_steps} steps (templates nested too deep?)")
        for dep in step.depends_on:
            if dep not in self._steps:
                raise at.error(f"step '{step.name}' depends on unknown step '{dep}'")
        self._steps[step.name] = _StepDraft(step)

    def has_step(self, name: str) -> bool:
        return name in self._steps

    def declare(self, uri: str, origin: str, endpoint: str | None = None) -> None:
        """Record a dataset URI seen at `origin`, consumed or not."""
        draft = self._datasets.setdefault(uri, _DatasetDraft())
        draft.origins.setdefault(origin)
        if endpoint and not draft.endpoint:
            draft.endpoint = endpoint

    def consume(self, step: str, uri: str, origin: str, endpoint: str | None = None) -> None:
        """Record that `step` reads dataset `uri`."""
        self.declare(uri, origin, endpoint)
        self._datasets[uri].consumers.setdefault(step)
        self._steps[step].datasets.setdefault(uri)

    def note(self, where: str, reason: str, step: str | None = None) -> None:
        """Report something that could not be resolved from the file."""
        self._unresolved.setdefault((step, where, reason))

    def use_value(self, step: str | None, val: Val, where: str, name: str, typed: bool = False) -> None:
        """Record the URIs in a value flowing into `step`, or why it is unknown.

        `typed` means the value is a dataset location for sure (an importer
        URI, an artifact); otherwise an unknown value is only reported when
        its name suggests data.
        """
        if val.produced_by is not None:
            return  # an intermediate artifact, made by the pipeline itself
        if val.unknown is not None:
            if typed or looks_like_data(name):
                self.note(where, val.unknown, step)
            return
        for value, origin in val.options:
            if typed:
                self.use_location(step, value, origin)
            else:
                self.use_text_values(step, value, origin)

    def use_location(self, step: str | None, value: Any, origin: str) -> None:
        """`use_text_values` for a value that is a dataset location for sure
        (an importer's URI, an artifact): a whole `scheme://...` string counts
        whatever its scheme (huggingface://, oci://...), so the plan lists it
        with the reason it cannot be fetched instead of dropping it."""
        uri = value.strip() if isinstance(value, str) else ""
        if not scheme_of(uri) or "{{" in uri:
            self.use_text_values(step, value, origin)
        elif step is None:
            self.declare(uri, origin)
        else:
            self.consume(step, uri, origin)

    def use_text_values(self, step: str | None, value: Any, origin: str) -> None:
        """Find URIs in every string of `value`; record them for `step`."""
        for text in strings_in(value):
            uris, partial = uris_in_text(text)
            for uri in uris:
                if step is None:
                    self.declare(uri, origin)
                else:
                    self.consume(step, uri, origin)
            for prefix in partial:
                self.note(origin, f"URI '{prefix}' is completed by a value known only at run time", step)

    def note_split_location(self, step: str, inputs: dict[str, Val], where: str) -> None:
        """A bucket and an object key given as separate inputs (the URI is
        put together in the component's code, e.g. `fget_object(bucket, key)`):
        the cache cannot see that read, so say how to make it visible."""
        def plain(pattern: re.Pattern, skip: re.Pattern | None) -> list[tuple[str, str]]:
            out = []
            for name, val in inputs.items():
                value = val.options[0][0] if val.known and val.options else None
                if (isinstance(value, str) and value.strip("/") and not scheme_of(value)
                        and pattern.search(name) and not (skip and skip.search(name))
                        and not says_not_data(name)):
                    out.append((name, value.strip("/")))
            return out
        buckets, keys = plain(_BUCKET_NAME, None), plain(_KEY_NAME, _BUCKET_NAME)
        if buckets and keys:
            (bn, bv), (kn, kv) = buckets[0], keys[0]
            scheme = "gs" if re.search(r"gcs|(?:^|_)gs(?:_|$)", bn, re.I) else "s3"
            self.note(where, f"bucket '{bv}' ({bn}) and object '{kv}' ({kn}) are separate inputs, "
                      f"so the step builds the URI in code: if it reads {scheme}://{bv}/{kv}, pass "
                      "that as one input to let the cache prefetch it", step)

    def add_gpus(self, step: str, count: int, accelerator: str | None) -> None:
        draft = self._steps[step]
        draft.gpus += count
        draft.accelerator = draft.accelerator or accelerator

    def add_hint(self, step: str, hint: str) -> None:
        self._steps[step].hints.setdefault(hint)

    def build(self, name: str, fmt: str, source: str, parameters: dict[str, Any]) -> Pipeline:
        """Freeze everything into a Pipeline."""
        steps = tuple(
            _finish_step(d) for d in self._steps.values()
        )
        datasets = tuple(
            _finish_dataset(uri, d) for uri, d in sorted(self._datasets.items())
        )
        unresolved = tuple(Unresolved(where, reason, step) for step, where, reason in self._unresolved)
        return Pipeline(name, fmt, source, steps, datasets, unresolved, tuple(parameters.items()))


def _finish_step(draft: _StepDraft) -> Step:
    s = draft.step
    return Step(
        name=s.name, kind=s.kind, template=s.template, depends_on=s.depends_on,
        datasets=tuple(draft.datasets), gpus=draft.gpus, accelerator=draft.accelerator,
        node_hints=tuple(draft.hints), condition=s.condition, loop=s.loop, parent=s.parent,
    )


def _finish_dataset(uri: str, draft: _DatasetDraft) -> Dataset:
    fetchable, reason = classify(uri)
    return Dataset(
        uri=uri, scheme=scheme_of(uri), fetchable=fetchable, reason=reason,
        consumers=tuple(draft.consumers), origins=tuple(draft.origins), endpoint=draft.endpoint,
    )
