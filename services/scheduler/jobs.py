"""Job registrations and splits as the scheduler stores them (pure values + validation)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from gpufair.common.errors import InvalidArgument
from gpufair.common.keys import check_segment
from gpufair.common.limits import MAX_BATCH as MAX_GLOBAL_BATCH
from gpufair.common.limits import MAX_RANKS


@dataclass(frozen=True)
class Placement:
    rank: int
    node: str
    device_id: str
    device_type: str = ""
    max_batch: int = 0  # 0 = no cap


@dataclass(frozen=True)
class JobSpec:
    job_id: str
    model: str
    global_batch: int
    total_samples: int
    ranks: tuple[Placement, ...]
    exclusive_rate: float = 0.0
    weight: float = 1.0

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "JobSpec":
        ranks = tuple(Placement(**r) for r in d["ranks"])
        return cls(**{**d, "ranks": ranks})


def is_held(shares: Sequence[float]) -> bool:
    """Paced shares of nothing: the job waits at a step boundary (empty: unpaced)."""
    return bool(shares) and max(shares) <= 0


@dataclass(frozen=True)
class Split:
    """A versioned split; `version` never goes backwards for a job."""

    version: int
    apply_step: int
    batch_sizes: tuple[int, ...]
    policy: str
    reason: str
    issued_unix_s: float
    slowdown: float = 0.0
    shares: tuple[float, ...] = ()  # paced shares by rank (empty: unpaced; all 0: held)

    @property
    def held(self) -> bool:
        return is_held(self.shares)

    def to_json(self) -> dict:
        return {**asdict(self), "batch_sizes": list(self.batch_sizes), "shares": list(self.shares)}

    @classmethod
    def from_json(cls, d: dict) -> "Split":
        return cls(**{**d, "batch_sizes": tuple(d["batch_sizes"]), "shares": tuple(d.get("shares", ()))})


def _id(kind: str, value: str) -> str:
    try:
        return check_segment(kind, value)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None


def check_job_id(job_id: str) -> str:
    """`job_id` if it is a valid id, else InvalidArgument naming what is wrong."""
    return _id("job_id", job_id)


def validate_spec(spec: JobSpec) -> JobSpec:
    """Return the spec if it can be scheduled; InvalidArgument naming the problem otherwise."""
    _id("job_id", spec.job_id)
    if not spec.model or len(spec.model) > 200:
        raise InvalidArgument("model must be 1-200 characters")
    n = len(spec.ranks)
    if not 1 <= n <= MAX_RANKS:
        raise InvalidArgument(f"a job needs 1-{MAX_RANKS} ranks, got {n}")
    if sorted(r.rank for r in spec.ranks) != list(range(n)):
        raise InvalidArgument(f"ranks must be numbered 0..{n - 1} exactly once, got {sorted(r.rank for r in spec.ranks)}")
    if not n <= spec.global_batch <= MAX_GLOBAL_BATCH:
        raise InvalidArgument(f"global_batch={spec.global_batch} must be in [{n} (one per rank), {MAX_GLOBAL_BATCH}]")
    if spec.total_samples <= 0:
        raise InvalidArgument(f"total_samples={spec.total_samples} must be > 0")
    devices = [r.device_id for r in spec.ranks]
    for r in spec.ranks:
        if not r.device_id or len(r.device_id) > 253 or len(r.node) > 253 or len(r.device_type) > 64:
            raise InvalidArgument(f"rank {r.rank}: device_id is required; device_id/node at most 253, device_type 64 characters")
        if not 0 <= r.max_batch <= MAX_GLOBAL_BATCH:
            raise InvalidArgument(f"rank {r.rank}: max_batch={r.max_batch} must be in [0 (no cap), {MAX_GLOBAL_BATCH}]")
    if len(set(devices)) != n:
        raise InvalidArgument("two ranks of one job on the same device")
    caps = sum(r.max_batch or spec.global_batch for r in spec.ranks)
    if caps < spec.global_batch:
        raise InvalidArgument(f"per-rank max_batch caps hold {caps} < global_batch {spec.global_batch}")
    if not (math.isfinite(spec.exclusive_rate) and spec.exclusive_rate >= 0):
        raise InvalidArgument("exclusive_samples_per_s must be finite and >= 0")
    if not (math.isfinite(spec.weight) and 0 <= spec.weight <= 1000):
        raise InvalidArgument("weight must be in [0, 1000]")
    return spec


def validate_batch_sizes(spec: JobSpec, sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Check a manual split against the job: one entry per rank, >= 1, caps, exact sum."""
    if len(sizes) != len(spec.ranks):
        raise InvalidArgument(f"batch_sizes has {len(sizes)} entries; job {spec.job_id!r} has {len(spec.ranks)} ranks")
    if any(b < 1 for b in sizes):
        raise InvalidArgument("every rank needs a batch of at least 1")
    for r, b in zip(sorted(spec.ranks, key=lambda p: p.rank), sizes):
        if r.max_batch and b > r.max_batch:
            raise InvalidArgument(f"rank {r.rank}: batch {b} exceeds its max_batch {r.max_batch}")
    if sum(sizes) != spec.global_batch:
        raise InvalidArgument(f"batch_sizes sum to {sum(sizes)}, not the global batch {spec.global_batch}")
    return sizes
