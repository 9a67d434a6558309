"""The jobs prefix indexed by job (pure): the registry's mirror, kept current
from watch events so a read never scans the other jobs' keys.

Each key under `jobs/` belongs to one job: `<job>/spec`, `<job>/split`,
`<job>/pin`, `<job>/life` or `<job>/members/<rank>`. Values are parsed once, when they
change; a job's view is built on first read after a change and reused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from gpufair.common.state import Json
from gpufair.scheduler.jobs import JobSpec, Split
from gpufair.scheduler.lifecycle import JobLife

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobView:
    """What the registry knows of one job right now."""

    spec: JobSpec
    split: Split | None
    pinned: tuple[int, ...] | None
    live_ranks: int
    life: JobLife | None = None  # None only for a job registered before lives were recorded

    @property
    def active(self) -> bool:
        """Queued or running (decisions, the active list and command streams are for these)."""
        return self.life is None or self.life.active


@dataclass
class _Job:
    spec: JobSpec | None = None
    split: Split | None = None
    pin: tuple[int, ...] | None = None
    life: JobLife | None = None
    members: set[str] = field(default_factory=set)
    view: JobView | None = None  # built lazily, dropped on every change

    def empty(self) -> bool:
        return self.spec is None and self.split is None and self.pin is None and self.life is None and not self.members


class JobIndex:
    """Per-job state from (key, value) changes under `prefix`; `apply` is the mirror's listener."""

    def __init__(self, prefix: str, *, on_split: Callable[[str, Split], None] | None = None,
                 on_removed: Callable[[str], None] | None = None) -> None:
        self._prefix = prefix
        self._jobs: dict[str, _Job] = {}
        self._sorted: list[str] | None = None  # ids of jobs with a spec, sorted; None when stale
        self._on_split, self._on_removed = on_split, on_removed

    def apply(self, key: str, value: Json | None) -> None:
        """One key changed (None: deleted). Malformed values are logged and left out."""
        job, _, part = key[len(self._prefix):].partition("/")
        entry = self._jobs.setdefault(job, _Job())
        entry.view = None
        had_spec, was_active = entry.spec is not None, entry.life is None or entry.life.active
        try:
            self._set(entry, part, value)
        finally:
            if had_spec != (entry.spec is not None):
                self._sorted = None
            if entry.empty():
                del self._jobs[job]
        if part == "split" and value is not None and self._on_split and entry.split is not None:
            self._on_split(job, entry.split)
        elif self._on_removed and ((part == "spec" and value is None) or
                                   (part == "life" and was_active and entry.life is not None and not entry.life.active)):
            self._on_removed(job)  # deleted, or its life ended: its command streams end

    @staticmethod
    def _set(entry: _Job, part: str, value: Json | None) -> None:
        # Cleared first: a value that fails to parse leaves nothing stale behind.
        if part == "spec":
            entry.spec = None
            entry.spec = None if value is None else JobSpec.from_json(value)
        elif part == "split":
            entry.split = None
            entry.split = None if value is None else Split.from_json(value)
        elif part == "pin":
            entry.pin = None
            entry.pin = None if value is None else tuple(value["batch_sizes"])
        elif part == "life":
            entry.life = None
            entry.life = None if value is None else JobLife.from_json(value)
        elif part.startswith("members/"):
            (entry.members.discard if value is None else entry.members.add)(part)
        else:
            logger.debug("unknown key under the jobs prefix: %s", part)

    def job_ids(self) -> list[str]:
        """Ids of the registered jobs (those with a spec), sorted."""
        if self._sorted is None:
            self._sorted = sorted(j for j, e in self._jobs.items() if e.spec is not None)
        return self._sorted

    def view(self, job: str) -> JobView | None:
        entry = self._jobs.get(job)
        if entry is None or entry.spec is None:
            return None
        if entry.view is None:
            entry.view = JobView(entry.spec, entry.split, entry.pin, len(entry.members), entry.life)
        return entry.view

    def views(self) -> list[JobView]:
        return [v for v in map(self.view, self.job_ids()) if v is not None]

    def split(self, job: str) -> Split | None:
        entry = self._jobs.get(job)
        return None if entry is None else entry.split
