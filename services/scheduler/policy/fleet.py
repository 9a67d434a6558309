"""Value types of a scheduling round: every job the scheduler knows (waiting
or resident on GPUs), the GPUs, the levers to pull, and the round's plan.

Times are seconds on one clock (the caller's `now`), work is samples. A
job's *exclusive* figures are those with its GPUs to itself at the even
split: `exclusive_rate` samples/s, and per rank `sec_per_step` (fixed part,
synchronisation included) plus `sec_per_sample` GPU-busy seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Protocol, Sequence

from gpufair.common.errors import InvalidArgument


class Interference(Protocol):
    """What co-location does to a job: measured pairwise (`sim.Colocation`,
    the profile store) or nothing (`NoInterference`)."""

    def efficiency(self, model: str, neighbours: Sequence[str]) -> float:
        """Fraction of its time-sliced speed `model` keeps next to `neighbours` (<= 1)."""
        ...

    def compatible(self, model: str, other: str) -> bool:
        """False when the two cannot share a GPU at all (e.g. memory)."""
        ...


class NoInterference:
    """Pure time-slicing: no losses beyond sharing, every pair compatible."""

    def efficiency(self, model: str, neighbours: Sequence[str]) -> float:
        """Always 1."""
        return 1.0

    def compatible(self, model: str, other: str) -> bool:
        """Always True."""
        return True


@dataclass(frozen=True)
class Gpu:
    """One GPU and the node it sits in (multi-GPU jobs prefer one node)."""

    name: str
    node: str = ""


#: A job of unknown length (no sample count or speed) counts as this long
#: alone: neither starved nor rushed, and jobs of unknown length queue in
#: arrival order among themselves (`FleetJob.length_known` False).
UNKNOWN_ALONE_S = 3600.0


@dataclass(frozen=True)
class FleetJob:
    """A job as the round planner sees it: waiting (`gpus` empty) or resident.

    `rate` is its current speed (samples/s, measured or predicted; None:
    unknown), `attained_s` the GPU-seconds it has used so far (for LAS),
    `cached_nodes` the nodes whose cache holds its dataset (placement ties),
    `ready` False for a resident job whose trainers have not taken a step
    (starting): it keeps its GPUs and place but cannot use GPU time yet, so
    the round gives that time to others; for a waiting job, that its
    trainers start only once it is placed (a live submission), so the round
    that places it gives its GPUs' time to others as well. `length_known`
    False: its length is the `UNKNOWN_ALONE_S` stand-in, good for ordering
    but not for the makespan goal's latest start. `gpus_allowed`: for a
    waiting job, the only GPUs it may be placed on (a live submission: the
    devices its node offered); empty: any."""

    job: str
    num_gpus: int
    global_batch: int
    arrival_s: float
    samples_total: float
    exclusive_rate: float
    sec_per_sample: float
    sec_per_step: float = 0.0
    samples_done: float = 0.0
    model: str = ""
    rank_cap: int | None = None
    gpus: tuple[str, ...] = ()
    split: tuple[int, ...] = ()
    rate: float | None = None
    attained_s: float = 0.0
    cached_nodes: frozenset[str] = frozenset()
    ready: bool = True
    length_known: bool = True
    gpus_allowed: frozenset[str] = frozenset()

    @property
    def waiting(self) -> bool:
        """Not yet placed on GPUs."""
        return not self.gpus

    def alone_s(self) -> float:
        """Completion time with its GPUs to itself from the start (SD's denominator)."""
        return self.samples_total / self.exclusive_rate

    def remaining_s(self) -> float:
        """Exclusive time still needed."""
        return max(self.samples_total - self.samples_done, 0.0) / self.exclusive_rate

    def sd_alone_from(self, now: float) -> float:
        """Its slow-down if it ran alone from `now` to the end: the least it can still reach."""
        return (now - self.arrival_s + self.remaining_s()) / self.alone_s()


QUEUES = ("fifo", "fifo-strict", "las", "sd")
PLACEMENTS = ("least-loaded", "packed", "random", "sd")
SHARES = ("time-slicing", "paced")


@dataclass(frozen=True)
class Levers:
    """Which rule pulls each lever (`gpufair sim --queue/--placement/--shares/--policy`).

    queue: who is admitted first and, with paced shares, who runs:
      `fifo` (arrival order; a job that cannot start lets later ones pass),
      `fifo-strict` (arrival order, no job passes an earlier one: Gavel's
      FIFO), `las` (least attained GPU service first, as Tiresias), `sd`
      (earliest slow-down deadline first, `policy/priority.py`).
    placement: which GPUs an admitted job gets (`policy/placement.py`).
    shares: `time-slicing` (every resident runs, the GPU divides its time by
      its own rule) or `paced` (the planner gives each resident rank a share
      of its GPU's time, 0 holding it at a step boundary; `policy/paced.py`).
    split: the split policy; with paced shares every policy but `even` plans
      the split jointly with the shares.
    max_per_gpu: jobs resident on one GPU at most: a memory bound, since a
      held rank keeps its memory (the measured data has no memory sizes).
    min_share: a job is not run on less of a GPU than this (a rank beside one
      with at least this much may have a sliver of a lent GPU, `paced.Filler`).
    """

    queue: str = "sd"
    placement: str = "sd"
    shares: str = "paced"
    split: str = "sd-maxmin"
    max_per_gpu: int = 4
    min_share: float = 0.05

    def validated(self) -> Levers:
        """Self, or InvalidArgument naming the bad lever and the choices."""
        for name, value, choices in (("queue", self.queue, QUEUES),
                                     ("placement", self.placement, PLACEMENTS),
                                     ("shares", self.shares, SHARES)):
            if value not in choices:
                raise InvalidArgument(f"unknown {name} {value!r}; choose one of "
                                      f"{', '.join(choices)}")
        if self.max_per_gpu < 1:
            raise InvalidArgument(f"max_per_gpu must be >= 1, got {self.max_per_gpu}")
        if not 0 < self.min_share <= 1:
            raise InvalidArgument(f"min_share must be in (0, 1], got {self.min_share}")
        return self


#: `--preset NAME`: the Kubernetes default with plain DDP, and every lever on.
PRESETS: Mapping[str, Levers] = MappingProxyType({
    "k8s": Levers("fifo", "least-loaded", "time-slicing", "even"),
    "gpufair": Levers(),
})


@dataclass(frozen=True)
class Placed:
    """Why a waiting job went where it did (`gpufair submit` prints it).

    predicted_sd: its slow-down if it keeps the speed it starts at (its
      share of its most shared GPU), counting the wait so far; inf if it
      starts held.
    neighbours: the other jobs resident on its GPUs.
    how: how it uses them ("alone", "time-sliced 2 ways", "paced to 50 %").
    """

    predicted_sd: float
    neighbours: tuple[str, ...]
    how: str


@dataclass(frozen=True)
class QueueEntry:
    """A job that stays queued this round, and why (`gpufair queue`)."""

    job: str
    position: int  # 1 = next to start
    waited_s: float
    predicted_start_s: float  # from now; an estimate from the exclusive times ahead of it
    reason: str


@dataclass(frozen=True)
class RoundPlan:
    """What a round decided.

    admitted: waiting jobs placed now -> their GPUs (rank order).
    shares: with paced shares, every resident job -> per-rank share of its
      GPU's time (0 = held); empty under time-slicing.
    splits: with paced shares, per-rank batches planned with the shares.
    queue: the jobs still waiting, in order.
    priority: every job's rank in the queue order (0 = most urgent).
    target_sd: the slow-down target the `sd` queue's deadlines use.
    outlook: with paced shares and `sd` placement, what an arrival meets on
      every GPU, for placing it before the next round (`arrival.py`).
    placed: every admitted job -> why it went there.
    unpaced: jobs that lent GPU time and yet run unpaced (`paced.Filler.unpaced`):
      `shares` stays the planned division of each GPU (summing to at most 1),
      what their trainers are told is share 1.
    """

    admitted: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    shares: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    splits: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    queue: tuple[QueueEntry, ...] = ()
    priority: Mapping[str, int] = field(default_factory=dict)
    target_sd: float = 1.0
    outlook: object | None = None
    placed: Mapping[str, Placed] = field(default_factory=dict)
    unpaced: frozenset[str] = frozenset()


def validate_fleet(jobs: Sequence[FleetJob], gpus: Sequence[Gpu]) -> None:
    """InvalidArgument when the round's input cannot be planned on."""
    names = {g.name for g in gpus}
    if len(names) != len(gpus):
        raise InvalidArgument("two GPUs share a name")
    seen: set[str] = set()
    for j in jobs:
        if j.job in seen:
            raise InvalidArgument(f"job {j.job!r} appears twice")
        seen.add(j.job)
        if not 1 <= j.num_gpus <= len(gpus):
            raise InvalidArgument(f"job {j.job!r} needs {j.num_gpus} GPUs; the cluster has "
                                  f"{len(gpus)}")
        if j.global_batch < j.num_gpus:
            raise InvalidArgument(f"job {j.job!r}: global batch {j.global_batch} < "
                                  f"{j.num_gpus} GPUs")
        if not (j.exclusive_rate > 0 and j.samples_total > 0 and j.sec_per_sample > 0
                and j.sec_per_step >= 0 and j.samples_done >= 0):
            raise InvalidArgument(f"job {j.job!r}: rates, costs and work must be positive")
        if j.gpus:
            if len(j.gpus) != j.num_gpus or len(set(j.gpus)) != j.num_gpus:
                raise InvalidArgument(f"job {j.job!r}: needs {j.num_gpus} distinct GPUs, "
                                      f"has {list(j.gpus)}")
            unknown = [g for g in j.gpus if g not in names]
            if unknown:
                raise InvalidArgument(f"job {j.job!r}: unknown GPU {unknown[0]!r}")
            if len(j.split) != j.num_gpus or sum(j.split) != j.global_batch \
                    or min(j.split) < 1:
                raise InvalidArgument(f"job {j.job!r}: split {list(j.split)} must have "
                                      f"{j.num_gpus} entries >= 1 summing to {j.global_batch}")
