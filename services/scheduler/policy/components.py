"""Splitting one max-min problem into independent pieces, and the pieces
that have a closed form.

Jobs interact only through GPUs they share, so the lexicographic max-min
optimum of the whole cluster is the optimum of each connected component
(jobs linked by shared GPUs) on its own. Two kinds of component are solved
here without an LP, exactly up to floating-point bisection:

- a lone job (shares no GPU): its best is simply its top speed, the split
  that makes its ranks finish a step together (`lone_job_rates`);
- one shared GPU whose occupants all have a fixed split (single-GPU or
  pinned jobs): the level at which their demands fill the GPU exactly
  (`single_gpu_level`).

Bisections run vectorised over every such component at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpufair.scheduler.policy.types import ClusterState, JobState

_BISECT = 90  # halvings of a bracket: well below float resolution


def _settled(lo: np.ndarray, hi: np.ndarray, new_lo: np.ndarray, new_hi: np.ndarray) -> bool:
    """A bisection step that moved nothing: float resolution is reached and
    every further step would repeat it, so stopping gives the same answer."""
    return bool(np.array_equal(lo, new_lo) and np.array_equal(hi, new_hi))


def fixed_split(job: JobState) -> tuple[int, ...]:
    """The split a job that cannot be re-split will run with."""
    return job.pinned if job.pinned is not None else job.split


@dataclass(frozen=True)
class Components:
    """Job indices grouped by connected component, and which are trivial."""

    groups: tuple[tuple[int, ...], ...]
    lone: tuple[int, ...]  # component = one job sharing no GPU
    single_gpu: tuple[tuple[int, ...], ...]  # one GPU, every occupant has a fixed split
    general: tuple[tuple[int, ...], ...]  # everything else: needs the LP


def find_components(cluster: ClusterState) -> Components:
    """Union-find over GPUs: jobs are linked when they have a rank on one GPU."""
    jobs = cluster.jobs
    parent = list(range(len(jobs)))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    owner: dict[str, int] = {}
    for j, job in enumerate(jobs):
        for r in job.ranks:
            k = owner.setdefault(r.gpu, j)
            if k != j:
                parent[root(j)] = root(k)
    members: dict[int, list[int]] = {}
    for j in range(len(jobs)):
        members.setdefault(root(j), []).append(j)
    groups = tuple(tuple(m) for m in members.values())
    lone, single, general = [], [], []
    for g in groups:
        if len(g) == 1:
            lone.append(g[0])
        elif all(len(jobs[j].ranks) == 1 for j in g):
            single.append(g)  # linked single-rank jobs all sit on the same GPU
        else:
            general.append(g)
    return Components(groups, tuple(lone), tuple(single), tuple(general))


def lone_job_rates(cluster: ClusterState, lone: tuple[int, ...]
                   ) -> dict[int, tuple[float, np.ndarray]]:
    """Top speed of jobs that share nothing: job -> (step rate, per-rank real
    batches). A fixed split runs at 1 / slowest rank; a splittable job's
    batches b_k = clip((T - a_k) / c_k, 1, cap_k) at the smallest step time T
    whose batches sum to B (every unsaturated rank then finishes at T)."""
    out: dict[int, tuple[float, np.ndarray]] = {}
    flex = []
    for j in lone:
        job = cluster.jobs[j]
        if not job.splittable:
            split = fixed_split(job)
            out[j] = (1.0 / max(r.step_time(b) for r, b in zip(job.ranks, split)),
                      np.array(split, dtype=float))
        else:
            flex.append(j)
    if not flex:
        return out
    sizes = np.array([len(cluster.jobs[j].ranks) for j in flex])
    owner = np.repeat(np.arange(len(flex)), sizes)
    ranks = [r for j in flex for r in cluster.jobs[j].ranks]
    big_b = np.array([cluster.jobs[j].global_batch for j in flex], dtype=float)
    a = np.array([r.sec_per_step for r in ranks])
    c = np.array([r.sec_per_sample for r in ranks])
    hi = np.array([min(r.cap, b) if r.cap is not None else b
                   for r, b in zip(ranks, big_b[owner])], dtype=float)
    lo_t = np.full(len(flex), np.inf)
    hi_t = np.zeros(len(flex))
    np.minimum.at(lo_t, owner, a + c)  # T below every rank's 1-sample time: sum too small
    np.maximum.at(hi_t, owner, a + c * hi)  # every rank at its cap: sum >= B
    for _ in range(_BISECT):
        mid = 0.5 * (lo_t + hi_t)
        b = np.clip((mid[owner] - a) / c, 1.0, hi)
        enough = np.bincount(owner, weights=b, minlength=len(flex)) >= big_b
        new_hi, new_lo = np.where(enough, mid, hi_t), np.where(enough, lo_t, mid)
        if _settled(lo_t, hi_t, new_lo, new_hi):
            break
        lo_t, hi_t = new_lo, new_hi
    b = np.clip((hi_t[owner] - a) / c, 1.0, hi)
    # Trim the bisection's tiny excess off unsaturated ranks so the sum is exactly B.
    total = np.bincount(owner, weights=b, minlength=len(flex))
    b *= (big_b / total)[owner]
    step = np.zeros(len(flex))
    np.maximum.at(step, owner, a + c * b)
    per_job = np.split(b, np.cumsum(sizes)[:-1])
    for i, j in enumerate(flex):
        out[j] = (1.0 / step[i], per_job[i])
    return out


def single_gpu_level(usage: np.ndarray, owner: np.ndarray, n: int, floor: np.ndarray,
                     weight: np.ndarray) -> np.ndarray:
    """For each of `n` one-GPU components, the level S (> its largest `floor`)
    at which sum_j usage_j * weight_j / (S - floor_j) = 1: the common bound
    every occupant reaches when they fill the GPU exactly (demands of the
    form weight / (S - floor) are the slow-down objective's; see maxmin)."""
    top = np.full(n, -np.inf)
    np.maximum.at(top, owner, floor)
    term = usage * weight
    lo = np.zeros(n)
    np.maximum.at(lo, owner, term - (top[owner] - floor))  # each job alone must fit
    hi = np.bincount(owner, weights=term, minlength=n)  # all at the top floor fit
    lo, hi = np.maximum(lo, 1e-300), np.maximum(hi, 1e-300)
    for _ in range(_BISECT):
        mid = np.sqrt(lo * hi)  # geometric: gaps span many orders of magnitude
        load = np.bincount(owner, weights=term / (top[owner] + mid[owner] - floor), minlength=n)
        fits = load <= 1.0
        new_hi, new_lo = np.where(fits, mid, hi), np.where(fits, lo, mid)
        if _settled(lo, hi, new_lo, new_hi):
            break
        lo, hi = new_lo, new_hi
    return top + hi
