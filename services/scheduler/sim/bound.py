"""Lower bounds on a trace's largest slow-down and makespan, whatever the
scheduler.

The bound is the fluid, clairvoyant relaxation. The whole trace is known in
advance. Jobs may be preempted, migrated and run on a fraction of their
GPUs. Each job j still needs its exclusive GPU time g_j * t_j, no earlier
than its arrival a_j, and it never runs faster than alone: at any moment it
uses at most its g_j GPUs. A GPU does at most one GPU-second of work per
second.

That last condition holds for every configuration the simulator runs. A
paced GPU runs one rank at a time. Time-slicing divides a GPU's time and
divides each rank's cost by its interference, which is at most 1. A rank
given a smaller batch than its neighbours can move faster, but its job as a
whole still needs the same GPU-seconds: each rank's share of the GPU must
cover its step, and those shares add up to at least g_j.

With slow-down S, job j must finish by a_j + S * t_j. Whether every job can
is a transportation problem (Horn, 1974): GPU-seconds flow from jobs into
the intervals between consecutive arrivals and deadlines. A job sends at
most g_j times an interval's length into it and only into intervals inside
its window, and each interval takes at most num_gpus times its length. S is
feasible when the maximum flow carries all the work. Windows only widen as
S grows, so the smallest feasible S is found by bisection.

The same flow with one deadline for every job bounds the makespan (from the
first arrival). The trace's exclusive GPU-seconds over the GPUs times that
bound is the most utilisation a schedule can reach while its GPUs are busy
only with useful work (`TraceBounds.busy_cap`). Time-slicing also counts the
time interference costs it as busy, so its utilisation may lie above the cap.

The online counterpart, over the jobs present at one moment, is the `sd`
queue's target (`policy/priority.sd_target`).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import maximum_flow

from gpufair.common.errors import InvalidArgument
from gpufair.scheduler.sim.colocation import Colocation
from gpufair.scheduler.sim.engine import exclusive_rate_of
from gpufair.scheduler.sim.workload import TraceJob

_UNITS = 2e8  # integer capacities: the largest total in units of this many parts
_REL_TOL = 1e-4


class TraceBounds(NamedTuple):
    """What no schedule of a trace does better than (module docstring)."""

    max_sd: float
    makespan_s: float  # from the first arrival
    busy_cap: float  # exclusive GPU-seconds / (GPUs x makespan_s)


def max_sd_bound(jobs: Sequence[tuple[float, float, int]], num_gpus: int) -> float:
    """A max SD no schedule of `jobs` on `num_gpus` GPUs goes under: the
    relaxation's optimum, less at most `_REL_TOL` of it, so it stays a lower
    bound. `jobs` holds one (arrival_s, alone_s, num_gpus) per job. The
    graph has a job-by-interval edge set, fine for the benchmark's traces of
    a few hundred jobs."""
    arrival, alone, width = _columns(jobs, num_gpus)
    if not len(arrival):
        return 1.0
    return _smallest(lambda s: _fits(arrival, arrival + s * alone, width, alone, num_gpus), 1.0)


def makespan_bound(jobs: Sequence[tuple[float, float, int]], num_gpus: int) -> float:
    """Seconds from the first arrival that no schedule of `jobs` ends sooner
    than (`jobs` and the tolerance as in `max_sd_bound`)."""
    arrival, alone, width = _columns(jobs, num_gpus)
    if not len(arrival):
        return 0.0
    first = float(arrival.min())
    # The two obvious bounds: the last job alone, and all the work packed.
    floor = max(float(np.max(arrival + alone)) - first, float((width * alone).sum()) / num_gpus)
    return _smallest(lambda t: _fits(arrival, np.full(len(arrival), first + t), width, alone,
                                     num_gpus), floor)


def _columns(jobs: Sequence[tuple[float, float, int]], num_gpus: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arrivals, times alone and widths of `jobs`, checked."""
    if num_gpus < 1:
        raise InvalidArgument(f"num_gpus must be >= 1, got {num_gpus}")
    if not jobs:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    arrival, alone, width = (np.array(col, dtype=float) for col in zip(*jobs))
    if np.any(alone <= 0) or np.any(width < 1) or np.any(width > num_gpus):
        raise InvalidArgument("every job needs alone_s > 0 and 1 <= num_gpus <= the cluster's")
    return arrival, alone, width


def _smallest(feasible: Callable[[float], bool], floor: float) -> float:
    """The smallest x >= `floor` (> 0) that is `feasible` (monotone in x), less
    at most `_REL_TOL` of it."""
    if feasible(floor):
        return floor
    lo, hi = floor, 2.0 * floor
    while not feasible(hi):
        lo, hi = hi, 2.0 * hi
    while hi - lo > _REL_TOL * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if feasible(mid) else (mid, hi)
    return lo


def _fits(arrival: np.ndarray, due: np.ndarray, width: np.ndarray, alone: np.ndarray,
          num_gpus: int) -> bool:
    """Can every job finish by its `due` (module docstring)?"""
    work = width * alone
    points = np.unique(np.concatenate([arrival, due]))
    length = np.diff(points)
    n, k = len(arrival), len(length)
    # Job j may use interval i when the interval lies inside its window.
    inside = (points[:-1][None, :] >= arrival[:, None]) & (points[1:][None, :] <= due[:, None])
    # Integer capacities, rounded so that the relaxation only gets looser:
    # work down, what jobs and intervals can take up.
    unit = max(float(work.sum()), num_gpus * float(points[-1] - points[0])) / _UNITS
    need = np.floor(work / unit).astype(np.int64)
    job_cap = np.ceil(width[:, None] * length[None, :] / unit).astype(np.int64)
    gpu_cap = np.ceil(num_gpus * length / unit).astype(np.int64)
    # Nodes: 0 source, 1..n jobs, n+1..n+k intervals, n+k+1 sink.
    rows_j, cols_i = np.nonzero(inside)
    src = np.concatenate([np.zeros(n, np.int64), 1 + rows_j, 1 + n + np.arange(k)])
    dst = np.concatenate([1 + np.arange(n), 1 + n + cols_i, np.full(k, n + k + 1)])
    cap = np.concatenate([need, job_cap[rows_j, cols_i], gpu_cap])
    keep = cap > 0
    graph = csr_array((cap[keep].astype(np.int32), (src[keep], dst[keep])),
                      shape=(n + k + 2, n + k + 2))
    return int(maximum_flow(graph, 0, n + k + 1).flow_value) >= int(need.sum())


def trace_bounds(colocation: Colocation, trace: Sequence[TraceJob], num_gpus: int
                 ) -> TraceBounds:
    """The bounds of a trace, each job alone at the file's speed for its GPU
    count (the simulator's slow-down denominator)."""
    jobs = [(j.arrival_s, j.total_samples / exclusive_rate_of(
        colocation.cost(j.model).at(j.num_gpus), j), j.num_gpus) for j in trace]
    span = makespan_bound(jobs, num_gpus)
    work = sum(alone * width for _, alone, width in jobs)
    return TraceBounds(max_sd_bound(jobs, num_gpus), span,
                       work / (num_gpus * span) if span > 0 else 0.0)
