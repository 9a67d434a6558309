"""Values the node cache hands out: entry states, progress, manifests."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class EntryState(str, enum.Enum):
    ABSENT = "absent"
    FETCHING = "fetching"
    CACHED = "cached"
    FAILED = "failed"


@dataclass(frozen=True)
class Progress:
    """How far a fetch is; `total_bytes` is 0 until the dataset has been listed."""

    done_bytes: int = 0
    total_bytes: int = 0
    objects_done: int = 0
    objects_total: int = 0

    @property
    def fraction(self) -> float:
        return self.done_bytes / self.total_bytes if self.total_bytes else 0.0


@dataclass(frozen=True)
class EntryStatus:
    """What a caller sees of one dataset on this node."""

    uri: str
    entry_id: str
    state: EntryState
    path: str | None = None
    size_bytes: int = 0
    progress: Progress | None = None
    last_use: float = 0.0
    pin_owners: tuple[str, ...] = ()
    reason: str = ""
    verified: str = ""

    @property
    def pinned(self) -> bool:
        return bool(self.pin_owners)


@dataclass(frozen=True)
class ObjectSpec:
    """One object of a dataset as listed/stat'ed: where it goes and what to check."""

    key: str
    rel: str
    size: int
    etag: str


@dataclass(frozen=True)
class Manifest:
    """Everything a dataset consists of, fixed before any byte is fetched."""

    uri: str
    bucket: str
    is_prefix: bool
    objects: tuple[ObjectSpec, ...]

    @property
    def total_bytes(self) -> int:
        return sum(o.size for o in self.objects)
