"""Integer splits that keep an LP plan's step time, for many jobs at once.

Why not proportional rounding (`round_split`): when a job's GPUs differ a
lot in cost, one sample more or less on the expensive rank moves that rank's
step time far more than it moves the cheap ranks'. Rounding the planned
batches to the nearest integers can then cost a large share of the job's
speed: planned batches (1.5, 30.5) on GPUs 31x apart in cost per sample
round to (2, 30), a third more step time on the dear rank, where (1, 31)
costs the job under 2 %.

What is kept instead is the GPU time the plan gives each rank: rank k of a
job planned at x_k samples/s (step rate s = sum_k x_k / B) uses a share
u_k = (a_k + c_k x_k / s) s of its GPU, with a_k = sec_per_step and
c_k = sec_per_sample. Holding those shares, integer batches b give the job
the step time max_k (a_k + c_k b_k) / u_k. The split minimising it (sum B,
1 <= b_k <= cap_k) follows from counting: the batch rank k runs within a
step time T is n_k(T) = clamp(floor((T u_k - a_k) / c_k), 1, cap_k),
nondecreasing in T, so the optimum T* is the smallest T, not below any
rank's one-sample time, with sum_k n_k(T) >= B (a split with a smaller max
has every b_k <= n_k at that smaller T and so sums below B). A bisection on
T runs over every job's ranks together until each rank has at most one
batch step left inside the bracket; the samples over B then come off the
slowest of those steps, which leaves the fastest steps that fill B: T*.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from gpufair.common.errors import InvalidArgument
from gpufair.scheduler.policy.types import JobState

_BISECT = 200  # halvings: the brackets settle at float resolution long before
_STARVED = 1e-12  # shares under this fraction of the job's largest count as none


def _fits(t: np.ndarray, u: np.ndarray, a: np.ndarray, c: np.ndarray,
          cap: np.ndarray) -> np.ndarray:
    """n_k(T): the largest batch in [1, cap] each rank runs within step time
    t (1 when none fits). A rank with c_k = 0 takes the same time for any
    batch, so it holds its cap as soon as its per-step cost fits."""
    budget = t * u - a
    n = np.where(c > 0, np.floor(budget / np.where(c > 0, c, 1.0)),
                 np.where(budget >= 0, cap, 1.0))
    return np.clip(n, 1.0, cap)


def _shares(rates: np.ndarray, owner: np.ndarray, total: np.ndarray, a: np.ndarray,
            c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each rank's planned GPU share u_k over its job's largest (scaling a
    job's shares scales its step times alike, so the best split stays), and
    which ranks the plan left (next to) none.

    A job without a usable plan (no positive finite share) gets u = 1
    everywhere: its fastest split on idle GPUs. A rank left no share in a
    planned job is slow at any batch; it counts as very dear (u tiny), so it
    keeps 1 sample unless the other ranks' caps force more onto it."""
    x = np.where(np.isfinite(rates), np.maximum(rates, 0.0), 0.0)
    step = np.bincount(owner, weights=x, minlength=len(total)) / total
    u = a * step[owner] + c * x
    u = np.where(np.isfinite(u) & (u > 0), u, 0.0)
    top = np.zeros(len(total))
    np.maximum.at(top, owner, u)
    u = np.where(top[owner] > 0, u / np.where(top > 0, top, 1.0)[owner], 1.0)
    starved = u < _STARVED
    return np.maximum(u, _STARVED), starved


def cost_splits(jobs: Sequence[JobState],
                rates: Sequence[Sequence[float]]) -> list[tuple[int, ...]]:
    """For every job: integer batches summing to its global batch, each in
    [1, cap], with the smallest step time the GPU shares of its planned
    per-rank sample rates `rates[i]` allow (see the module docstring)."""
    if not jobs:
        return []
    ranks = [r for job in jobs for r in job.ranks]
    sizes = np.array([len(job.ranks) for job in jobs])
    owner = np.repeat(np.arange(len(jobs)), sizes)
    total = np.array([job.global_batch for job in jobs], dtype=float)
    cap = np.array([job.global_batch if r.cap is None else min(r.cap, job.global_batch)
                    for job in jobs for r in job.ranks], dtype=float)
    flat = np.concatenate([np.asarray(x, dtype=float) for x in rates])
    if len(flat) != len(ranks) or np.any(sizes == 0) or np.any(total < sizes) \
            or np.any(np.bincount(owner, weights=cap, minlength=len(jobs)) < total):
        raise InvalidArgument("cannot split: a job has no ranks, a rate per rank missing, "
                              "fewer samples than ranks, or caps that hold less than its batch")
    a = np.array([r.sec_per_step for r in ranks], dtype=float)
    c = np.array([r.sec_per_sample for r in ranks], dtype=float)
    u, starved = _shares(flat, owner, total, a, c)
    b_lo, b_hi = _bracket(u, a, c, cap, starved, owner, total)
    return _trim(b_hi, b_lo, owner, total, (a + c * b_hi) / u, sizes)


def _bracket(u: np.ndarray, a: np.ndarray, c: np.ndarray, cap: np.ndarray, starved: np.ndarray,
             owner: np.ndarray, total: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Batches n(lo) and n(hi) at the ends of a step-time bracket around each
    job's optimum T*: n(hi) sums to >= B, n(lo) to < B (all 1 where T* is the
    one-sample bound itself). Bisection stops once no rank has more than one
    batch step inside the bracket (c_k = 0: all its steps cost the same time)."""
    n_job = len(total)
    lo, hi = np.zeros(n_job), np.zeros(n_job)
    # One sample per rank: no split is faster (a starved rank is slow whatever it holds).
    np.maximum.at(lo, owner, np.where(starved, 0.0, (a + c) / u))
    np.maximum.at(hi, owner, (a + c * cap) / u)  # every rank at its cap holds B
    n_lo = _fits(lo[owner], u, a, c, cap)
    at_lo = np.bincount(owner, weights=n_lo, minlength=n_job) >= total
    hi = np.where(at_lo, lo, hi * (1 + 1e-9))  # the margin beats rounding just under a cap
    n_lo = np.where(at_lo[owner], 1.0, n_lo)
    n_hi = _fits(hi[owner], u, a, c, cap)
    done = at_lo[owner] | (c == 0)  # at the one-sample bound any trim is optimal
    for _ in range(_BISECT):
        if np.all(done | (n_hi - n_lo <= 1)):
            break
        mid = 0.5 * (lo + hi)
        n_mid = _fits(mid[owner], u, a, c, cap)
        ok = np.bincount(owner, weights=n_mid, minlength=n_job) >= total
        new_lo, new_hi = np.where(ok, lo, mid), np.where(ok, mid, hi)
        if np.array_equal(lo, new_lo) and np.array_equal(hi, new_hi):
            break  # float resolution: steps closer than that tie anyway
        lo, hi = new_lo, new_hi
        n_lo, n_hi = np.where(ok[owner], n_lo, n_mid), np.where(ok[owner], n_mid, n_hi)
    return n_lo, n_hi


def _trim(b_hi: np.ndarray, b_lo: np.ndarray, owner: np.ndarray, total: np.ndarray,
          time: np.ndarray, sizes: np.ndarray) -> list[tuple[int, ...]]:
    """Take each job's surplus sum(b_hi) - B off its slowest ranks first,
    none below b_lo (sum(b_lo) <= B, so the surplus always fits). With at
    most one batch step per rank between b_lo and b_hi this drops the slowest
    steps, so the rest are the fastest ones that fill B: the optimum."""
    surplus = np.bincount(owner, weights=b_hi, minlength=len(total)) - total
    room = b_hi - b_lo
    order = np.lexsort((np.arange(len(b_hi)), -time, owner))  # by job, slowest first
    start = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    # Sorting by job first keeps every job's ranks at the same positions.
    before = np.cumsum(room[order]) - room[order]
    before -= before[start][owner]  # room ahead of each rank within its job
    take = np.zeros(len(b_hi))
    take[order] = np.clip(surplus[owner] - before, 0.0, room[order])
    out = (b_hi - take).astype(int)
    return [tuple(out[s:s + n].tolist()) for s, n in zip(start.tolist(), sizes.tolist())]
