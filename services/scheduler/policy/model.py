"""The time-slicing cost model shared by every policy and by the simulator.

A rank's step needs `w = sec_per_step + sec_per_sample * b` seconds of GPU
time. A GPU divides its time among its occupants max-min fairly
(processor sharing with demands): a synchronous job whose rank waits on a
slower rank elsewhere only takes the share it needs (`w / T_j`), and what it
leaves goes to the neighbours. The job's own step time is its slowest rank:
`T_j = max_r w_r / s_r`. The steady state is a fixed point, found by a few
vectorised water-filling passes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpufair.scheduler.policy.types import JobState

_PASSES = 60
_BIG = 2.0  # any demand above the capacity (1) acts as unbounded


@dataclass(frozen=True)
class SharedRates:
    """Steady-state speeds under time-slicing for given splits."""

    rates: np.ndarray  # samples/s per job, in input order
    gpu_busy: dict[str, float]  # fraction of each GPU's time in use
    shares: tuple[np.ndarray, ...] = ()  # per job, per rank: GPU share it could get


def even_split(total: int, n: int) -> tuple[int, ...]:
    """B/n per rank, the remainder spread one each over the first ranks."""
    q, rem = divmod(total, n)
    return tuple(q + (1 if i < rem else 0) for i in range(n))


def fallback_exclusive_rate(job: JobState) -> float:
    """Exclusive speed when no profile exists: an even split at the best
    per-sample and per-step cost seen on any rank (an upper bound on speed,
    so an estimated slow-down is never understated)."""
    c = min(r.sec_per_sample for r in job.ranks)
    a = min(r.sec_per_step for r in job.ranks)
    return job.global_batch / (a + c * max(even_split(job.global_batch, len(job.ranks))))


def exclusive_rate(job: JobState) -> float:
    """The profiled exclusive speed, else the documented fallback."""
    if job.exclusive_rate is not None and job.exclusive_rate > 0:
        return job.exclusive_rate
    return fallback_exclusive_rate(job)


def slowdown(job: JobState, rate: float) -> float:
    """SD = (elapsed + remaining / rate) / (total / exclusive rate)."""
    remaining = max(job.samples_total - job.samples_done, 0.0)
    alone = job.samples_total / exclusive_rate(job)
    if rate <= 0:
        return float("inf")
    return (job.elapsed_s + remaining / rate) / alone


def _waterfill(demand: np.ndarray, gpu: np.ndarray, n_gpu: int) -> np.ndarray:
    """Max-min fair shares of capacity 1 per GPU for (possibly infinite) demands.

    Exact: sort each GPU's demands; the level is set by the first demand d_p
    (ascending) with sum(d_<p) + (m - p) * d_p >= 1."""
    d_all = np.minimum(demand, _BIG)
    order = np.lexsort((d_all, gpu))
    d, g = d_all[order], gpu[order]
    count = np.bincount(g, minlength=n_gpu)
    start = np.concatenate(([0], np.cumsum(count)[:-1]))
    pos = np.arange(len(d)) - start[g]
    before = np.cumsum(d) - d
    before -= before[start[g]]
    hit = before + (count[g] - pos) * d >= 1.0
    first = np.full(n_gpu, len(d))
    np.minimum.at(first, g[hit], np.nonzero(hit)[0])
    level = np.full(n_gpu, np.inf)
    has = first < len(d)
    f = first[has]
    level[has] = (1.0 - before[f]) / (count[has] - pos[f])
    return np.minimum(demand, level[gpu])


def _step_times(w: np.ndarray, share: np.ndarray, ji: np.ndarray, n_job: int) -> np.ndarray:
    step = np.zeros(n_job)
    np.maximum.at(step, ji, w / share)
    return step


def shared_rates(jobs: tuple[JobState, ...] | list[JobState],
                 splits: list[tuple[int, ...]] | None = None) -> SharedRates:
    """Predict every job's speed when the GPUs are time-sliced among them."""
    gpu_names: dict[str, int] = {}
    job_idx, gpu_idx, work = [], [], []
    for j, job in enumerate(jobs):
        split = job.split if splits is None else splits[j]
        for rank, b in zip(job.ranks, split):
            job_idx.append(j)
            gpu_idx.append(gpu_names.setdefault(rank.gpu, len(gpu_names)))
            work.append(rank.step_time(b))
    if not jobs:
        return SharedRates(np.zeros(0), {}, ())
    ji, gi, w = np.array(job_idx), np.array(gpu_idx), np.array(work)
    n_job, n_gpu = len(jobs), len(gpu_names)
    share = 1.0 / np.bincount(gi, minlength=n_gpu)[gi]
    for _ in range(_PASSES):
        step = _step_times(w, share, ji, n_job)
        t_rank = w / share
        # Bottleneck ranks would use any extra time; the others only need w/T.
        elastic = t_rank >= step[ji] * (1 - 1e-9)
        demand = np.where(elastic, np.inf, w / step[ji])
        new = _waterfill(demand, gi, n_gpu)
        if np.allclose(new, share, rtol=1e-7, atol=1e-12):
            break
        # Damped: ties between bottlenecks on two GPUs would otherwise flip-flop.
        share = 0.5 * (share + new)
    step = _step_times(w, share, ji, n_job)
    used = np.minimum(share, w / step[ji])
    busy = np.bincount(gi, weights=used, minlength=n_gpu)
    batches = np.array([job.global_batch for job in jobs], dtype=float)
    # What a rank could get if it wanted more: the idle time on its GPU, or
    # the fair level its busiest neighbour holds, whichever is larger.
    level = np.zeros(n_gpu)
    np.maximum.at(level, gi, share)
    avail = np.minimum(np.maximum(used + np.maximum(1 - busy, 0)[gi], level[gi]), 1.0)
    per_job = tuple(np.split(avail, np.cumsum([len(job.ranks) for job in jobs])[:-1]))
    return SharedRates(batches / step, {g: float(busy[i]) for g, i in gpu_names.items()},
                       per_job)
