"""Value types of a parsed pipeline: steps, datasets, what stayed unresolved."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

#: Step kinds. Group nodes ("dag") take no time; they order their children.
CONTAINER, IMPORTER, DAG, RESOURCE, EXTERNAL, OTHER = (
    "container", "importer", "dag", "resource", "external", "other",
)

_UNSAFE = re.compile(r"[^A-Za-z0-9._:@+-]")


@dataclass(frozen=True)
class Step:
    """One node of the flattened pipeline DAG.

    `name` is the task path from the root (`condition-1/train-2`), unique in
    the pipeline; `template` is the component or Argo template it runs.
    """

    name: str
    kind: str
    template: str
    depends_on: tuple[str, ...] = ()
    datasets: tuple[str, ...] = ()
    gpus: int = 0
    accelerator: str | None = None
    node_hints: tuple[str, ...] = ()
    condition: str | None = None
    loop: str | None = None
    parent: str | None = None

    def history_key(self, pipeline: str) -> str:
        """A key for past durations of this step, safe as one etcd key segment."""
        return step_history_key(pipeline, self.name)


def step_history_key(pipeline: str, step: str) -> str:
    """The key past durations of `step` in `pipeline` are kept under (one etcd key segment)."""
    raw = f"{pipeline}:{step.replace('/', '.')}"
    return (_UNSAFE.sub("_", raw).lstrip("._:@+-") or "step")[:253]


@dataclass(frozen=True)
class Dataset:
    """A dataset URI, the steps that read it and where the URI came from."""

    uri: str
    scheme: str
    fetchable: bool
    reason: str | None
    consumers: tuple[str, ...]
    origins: tuple[str, ...]
    endpoint: str | None = None


@dataclass(frozen=True)
class Unresolved:
    """Something that may be a dataset but cannot be known from the file."""

    where: str
    reason: str
    step: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "where": self.where, "reason": self.reason}


@dataclass(frozen=True)
class Pipeline:
    """A parsed pipeline: format, flattened steps in dependency order, datasets."""

    name: str
    format: str
    source: str
    steps: tuple[Step, ...]
    datasets: tuple[Dataset, ...]
    unresolved: tuple[Unresolved, ...]
    parameters: tuple[tuple[str, Any], ...] = ()

    def step(self, name: str) -> Step:
        """The step called `name` (KeyError if there is none)."""
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(name)

    def dataset(self, uri: str) -> Dataset:
        for dataset in self.datasets:
            if dataset.uri == uri:
                return dataset
        raise KeyError(uri)


@dataclass(frozen=True)
class Val:
    """What is statically known about a value: its possible values, or why not.

    `options` holds (value, origin) pairs; a loop item has several. A value
    produced inside the pipeline (an output artifact) has `produced_by` set.
    """

    options: tuple[tuple[Any, str], ...] = ()
    unknown: str | None = None
    produced_by: str | None = None

    @staticmethod
    def of(value: Any, origin: str) -> Val:
        return Val(((value, origin),))

    @staticmethod
    def why(reason: str) -> Val:
        return Val(unknown=reason)

    @property
    def known(self) -> bool:
        return self.unknown is None and self.produced_by is None
