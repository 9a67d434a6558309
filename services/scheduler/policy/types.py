"""Value types of the policy core: what the service (or the simulator) knows
about the cluster, the knobs of a decision, and the decision itself.

Units: samples and seconds. A rank's cost is *GPU-busy* time, i.e. the time
the rank would take with the GPU to itself at the interference level it sees
now: step time of `b` samples = `sec_per_step + sec_per_sample * b`. How that
busy time stretches into wall time when several jobs time-slice one GPU is
the model's job (`gpufair.scheduler.policy.model`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from gpufair.common.errors import InvalidArgument


@dataclass(frozen=True)
class RankState:
    """One rank of a job: the GPU it sits on, its batch and its measured cost."""

    gpu: str
    batch: int
    sec_per_sample: float
    sec_per_step: float = 0.0
    cap: int | None = None  # largest batch that fits this GPU's memory

    def step_time(self, batch: int | float | None = None) -> float:
        """GPU-busy seconds for one step of `batch` (default: current) samples."""
        b = self.batch if batch is None else batch
        return self.sec_per_step + self.sec_per_sample * b


@dataclass(frozen=True)
class JobState:
    """A running job as the scheduler sees it.

    `rate` is the measured job speed (samples/s); None means "predict it from
    the cost model". `exclusive_rate` is the speed with its GPUs to itself
    (from the profile store); None falls back to `fallback_exclusive_rate`:
    the even split at the *best* per-sample and per-step cost observed on any
    of its ranks, i.e. an optimistic estimate that never understates SD.
    """

    job: str
    global_batch: int
    ranks: tuple[RankState, ...]
    samples_done: float = 0.0
    samples_total: float = 1.0
    elapsed_s: float = 0.0
    rate: float | None = None
    exclusive_rate: float | None = None
    pinned: tuple[int, ...] | None = None

    @functools.cached_property  # read per rank by most stages of a decision
    def split(self) -> tuple[int, ...]:
        """The current per-rank batches."""
        return tuple(r.batch for r in self.ranks)

    @property
    def splittable(self) -> bool:
        """Only unpinned jobs on several ranks can be re-split."""
        return len(self.ranks) > 1 and self.pinned is None


@dataclass(frozen=True)
class ClusterState:
    """Every job the scheduler decides for, in one snapshot."""

    jobs: tuple[JobState, ...]


@dataclass(frozen=True)
class PolicyConfig:
    """Knobs shared by every policy.

    min_change: act only when at least this fraction of a job's global batch
      would move (sum |new - old| / 2B); below it the split stays, so small
      measurement noise never makes splits oscillate.
    feedback_gain: step size of `sd-feedback` (fraction of the SD gap).
    waterfill_rounds: lexicographic max-min rounds of `sd-maxmin` before the
      final "use the leftover capacity" LP (each round costs a level search;
      rounds stop early once every job is frozen, or when the frozen floors
      stop being feasible at the LP's tolerance, seen after 20-115 rounds).
    maxmin_objective: what `sd-maxmin` equalises: "sd" (minimise the largest
      predicted slow-down, counting time already lost) or "rate" (maximise
      the smallest exclusive-normalised speed now).
    realise_evals: how many time-slicing model evaluations `sd-maxmin` may
      spend per component turning its LP plan into splits a time-sliced GPU
      really runs well (`policy/realise.py`); 0 keeps the LP's proportions.
    realise_work: per decision, the work all components together may spend
      on that, an evaluation costing (ranks of its component + 80) units
      (3-7 us each on one core: ~0.25 ms fixed per model evaluation plus
      3-7 us per rank); components holding the worst LP bound go first, a
      component too big for what is left keeps its rounded plan. The default
      bounds it near 25 ms per decision at any cluster size.
    """

    min_change: float = 0.05
    feedback_gain: float = 0.5
    waterfill_rounds: int = 2
    maxmin_objective: str = "sd"
    realise_evals: int = 40
    realise_work: int = 4000


def _frozen_numbers(numbers: Mapping[str, float]) -> Mapping[str, float]:
    return MappingProxyType(dict(numbers))


@dataclass(frozen=True)
class Decision:
    """A policy's verdict for one job: the split to use and why."""

    job: str
    policy: str
    split: tuple[int, ...]
    changed: bool
    explanation: str
    numbers: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "numbers", _frozen_numbers(self.numbers))

    def to_dict(self) -> dict:
        """A JSON-friendly view (for the admin "explain" RPC and the CLI)."""
        return {"job": self.job, "policy": self.policy, "split": list(self.split),
                "changed": self.changed, "explanation": self.explanation,
                "numbers": dict(self.numbers)}


def validate_job(job: JobState) -> None:
    """Raise InvalidArgument when a job's state cannot be decided on."""
    n = len(job.ranks)
    if n == 0:
        raise InvalidArgument(f"job {job.job!r}: no ranks")
    if job.global_batch < n:
        raise InvalidArgument(f"job {job.job!r}: global batch {job.global_batch} "
                              f"< {n} ranks (each rank needs >= 1 sample)")
    if sum(job.split) != job.global_batch:
        raise InvalidArgument(f"job {job.job!r}: split {list(job.split)} does not "
                              f"sum to global batch {job.global_batch}")
    if len({r.gpu for r in job.ranks}) != n:
        raise InvalidArgument(f"job {job.job!r}: two ranks on one GPU")
    for i, r in enumerate(job.ranks):
        if not (math.isfinite(r.sec_per_sample) and r.sec_per_sample > 0):
            raise InvalidArgument(f"job {job.job!r} rank {i}: sec_per_sample must be > 0")
        if not (math.isfinite(r.sec_per_step) and r.sec_per_step >= 0):
            raise InvalidArgument(f"job {job.job!r} rank {i}: sec_per_step must be >= 0")
        if r.batch < 1 or (r.cap is not None and r.cap < 1):
            raise InvalidArgument(f"job {job.job!r} rank {i}: batch and cap must be >= 1")
    caps = sum(r.cap if r.cap is not None else job.global_batch for r in job.ranks)
    if caps < job.global_batch:
        raise InvalidArgument(f"job {job.job!r}: per-GPU caps hold {caps} < "
                              f"global batch {job.global_batch}")
    if job.pinned is not None and (len(job.pinned) != n or sum(job.pinned) != job.global_batch
                                   or min(job.pinned) < 1):
        raise InvalidArgument(f"job {job.job!r}: pinned split {list(job.pinned)} must have "
                              f"{n} entries >= 1 summing to {job.global_batch}")
    if job.samples_total <= 0 or job.samples_done < 0 or job.elapsed_s < 0:
        raise InvalidArgument(f"job {job.job!r}: progress counters out of range")
