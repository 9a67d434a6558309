"""A lower bound on a trace's largest slow-down, whatever the scheduler.

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

The online counterpart, over the jobs present at one moment, is the `sd`
queue's target (`policy/priority.sd_target`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import maximum_flow

from gpufair.common.errors import InvalidArgument
from gpufair.scheduler.sim.colocation import Colocation
from gpufair.scheduler.sim.engine import exclusive_rate_of
from gpufair.scheduler.sim.workload import TraceJob

_UNITS = 2e8  # integer capacities: the largest total in units of this many parts
_REL_TOL = 1e-4


def max_sd_bound(jobs: Sequence[tuple[float, float, int]], num_gpus: int) -> float:
    """A max SD no schedule of `jobs` on `num_gpus` GPUs goes under: the
    relaxation's optimum, less at most `_REL_TOL` of it, so it stays a lower
    bound. `jobs` holds one (arrival_s, alone_s, num_gpus) per job. The
    graph has a job-by-interval edge set, fine for the benchmark's traces of
    a few hundred jobs."""
    if num_gpus < 1:
        raise InvalidArgument(f"num_gpus must be >= 1, got {num_gpus}")
    if not jobs:
        return 1.0
    arrival, alone, width = (np.array(col, dtype=float) for col in zip(*jobs))
    if np.any(alone <= 0) or np.any(width < 1) or np.any(width > num_gpus):
        raise InvalidArgument("every job needs alone_s > 0 and 1 <= num_gpus <= the cluster's")
    work = width * alone
    if _feasible(arrival, alone, width, work, num_gpus, 1.0):
        return 1.0
    lo, hi = 1.0, 2.0
    while not _feasible(arrival, alone, width, work, num_gpus, hi):
        lo, hi = hi, 2.0 * hi
    while hi - lo > _REL_TOL * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if _feasible(arrival, alone, width, work, num_gpus, mid) else (mid, hi)
    return lo


def _feasible(arrival: np.ndarray, alone: np.ndarray, width: np.ndarray, work: np.ndarray,
              num_gpus: int, s: float) -> bool:
    """Can every job finish by arrival + s * alone (module docstring)?"""
    due = arrival + s * alone
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


def trace_bound(colocation: Colocation, trace: Sequence[TraceJob], num_gpus: int) -> float:
    """`max_sd_bound` of a trace, each job alone at the file's speed for its
    GPU count (the simulator's slow-down denominator)."""
    return max_sd_bound([(j.arrival_s, j.total_samples / exclusive_rate_of(
        colocation.cost(j.model).at(j.num_gpus), j), j.num_gpus) for j in trace], num_gpus)
