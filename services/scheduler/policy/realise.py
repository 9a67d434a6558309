"""Turn sd-maxmin's plan into splits that time-slicing actually runs well.

The LP (`maxmin`, `lp`) may hand out each GPU's time in any proportions: it
can plan a job to use 80 % of a GPU while a neighbour makes do with 20 %. A
time-sliced GPU does not obey such a plan. It gives every rank that wants
more time an equal share (`model.shared_rates`), so a single-GPU neighbour
the plan meant to hold back takes its fair share anyway, and the job the
plan favoured runs slower than planned, sometimes slower than with the even
split (measured in the simulator: realised max SD 21 % above the LP's on
average, worse than even in 19 % of decisions). Splits are the only lever.

So the policy scores candidate splits with the same model the simulator and
the explanations use, and keeps the best one by *leximin* of per-job
"badness" (predicted slow-down, or exclusive/current speed for the rate
objective): the largest first, ties broken by the next. Per component of
jobs linked by shared GPUs (the others cannot feel a change):

1. start from the best of the LP-rounded, the current and the even splits
   (so a decision never makes the model's prediction worse than now);
2. stop if the component's worst job is already at the LP bound (nothing
   any split does can beat it), else improve greedily: for the worst jobs,
   try (a) the job straggler-balancing itself against the shares it gets,
   and (b) each splittable neighbour on one of its GPUs moving a quarter or
   half of its samples there onto its own least-loaded rank (freeing time
   the worst job can take); keep the best improving move, repeat until none
   improves or the evaluation budget is spent.

A candidate that moves less than `min_change` of a job's batch counts as no
change, as `finalize` would drop it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from gpufair.scheduler.policy.model import SharedRates, even_split, exclusive_rate, shared_rates
from gpufair.scheduler.policy.rounding import moved_fraction
from gpufair.scheduler.policy.simple import balanced_split
from gpufair.scheduler.policy.types import JobState

Split = tuple[int, ...]
_TOL = 1e-6  # relative: badness differences below this are ties
_TARGETS = 3  # worst jobs whose moves are tried before giving up
_FRACTIONS = (0.5, 0.25)


@dataclass(frozen=True)
class Realised:
    """Chosen splits of one component and what the model predicts for them."""

    splits: list[Split]
    badness: np.ndarray
    evaluations: int


def badness(jobs: Sequence[JobState], splits: Sequence[Split], objective: str,
            excl: np.ndarray | None = None) -> tuple[np.ndarray, SharedRates]:
    """Per-job badness under time-slicing (lower is better) and the model's rates.
    `excl` (the jobs' exclusive rates) may be passed in to save recomputing it."""
    sr = shared_rates(list(jobs), list(splits))
    if excl is None:
        excl = np.array([exclusive_rate(j) for j in jobs])
    rates = sr.rates
    with np.errstate(divide="ignore"):
        if objective == "rate":
            return np.where(rates > 0, excl / rates, np.inf), sr
        total = np.array([j.samples_total for j in jobs])
        rem = np.maximum(total - np.array([j.samples_done for j in jobs]), 0.0)
        elapsed = np.array([j.elapsed_s for j in jobs])
        return np.where(rates > 0, (elapsed + rem / rates) * excl / total, np.inf), sr


def leximin_better(a: np.ndarray, b: np.ndarray) -> bool:
    """True when `a` beats `b`: its sorted-descending vector is smaller at
    the first entry where the two differ by more than the tolerance."""
    for x, y in zip(np.sort(a)[::-1], np.sort(b)[::-1]):
        if x < y * (1 - _TOL):
            return True
        if x > y * (1 + _TOL):
            return False
    return False


def _snap(job: JobState, split: Split, min_change: float) -> Split:
    """What `finalize` would run: moves below the threshold are dropped."""
    return split if moved_fraction(job.split, split) >= min_change else job.split


def _moves(jobs: Sequence[JobState], cur: list[Split], sr: SharedRates, target: int,
           on_gpu: dict[str, list[tuple[int, int]]], min_change: float
           ) -> Iterator[tuple[int, Split]]:
    """Candidate (job, split) changes that could help job `target`."""
    if jobs[target].splittable:
        yield target, balanced_split(jobs[target], sr.shares[target])[0]
    for rank in jobs[target].ranks:
        for j, k in on_gpu[rank.gpu]:
            if j == target or not jobs[j].splittable:
                continue
            job, split = jobs[j], list(cur[j])
            finish = np.array([r.step_time(b) for r, b in zip(job.ranks, split)]) \
                / np.maximum(sr.shares[j], 1e-9)
            finish[k] = np.inf
            dst = int(np.argmin(finish))
            room = (job.ranks[dst].cap or job.global_batch) - split[dst]
            for frac in _FRACTIONS:
                d = min(max(int(split[k] * frac), math.ceil(min_change * job.global_batch), 1),
                        split[k] - 1, room)
                if d > 0:
                    moved = split.copy()
                    moved[k] -= d
                    moved[dst] += d
                    yield j, tuple(moved)


def realise(jobs: Sequence[JobState], proposed: Sequence[Split], objective: str,
            min_change: float, evaluations: int, bound: float = 0.0,
            excl: np.ndarray | None = None) -> Realised:
    """Best splits found for one component (see the module docstring).

    `bound` is the LP's optimum of the component's worst badness: a start
    that reaches it is returned without searching. `excl`: the jobs'
    exclusive rates, if the caller has them."""
    if excl is None:
        excl = np.array([exclusive_rate(j) for j in jobs])
    cur = [_snap(j, tuple(p), min_change) for j, p in zip(jobs, proposed)]
    best, sr = badness(jobs, cur, objective, excl)
    used = 1
    for start in ([j.split for j in jobs],
                  [_snap(j, even_split(j.global_batch, len(j.ranks)), min_change) for j in jobs]):
        if start == cur:
            continue
        bad, start_sr = badness(jobs, start, objective, excl)
        used += 1
        if leximin_better(bad, best):
            cur, best, sr = start, bad, start_sr
    on_gpu: dict[str, list[tuple[int, int]]] = {}
    for j, job in enumerate(jobs):
        for k, r in enumerate(job.ranks):
            on_gpu.setdefault(r.gpu, []).append((j, k))
    while used < evaluations and best.max() > bound * (1 + 1e-3):
        step = None
        for target in np.argsort(-best, kind="stable")[:_TARGETS]:
            for j, split in _moves(jobs, cur, sr, int(target), on_gpu, min_change):
                split = _snap(jobs[j], split, min_change)
                if split == cur[j] or used >= evaluations:
                    continue
                trial = cur.copy()
                trial[j] = split
                bad, trial_sr = badness(jobs, trial, objective, excl)
                used += 1
                if leximin_better(bad, best) and (step is None or leximin_better(bad, step[0])):
                    step = (bad, trial_sr, trial)
            if step is not None:
                break  # improve the worst job that can be improved, then look again
        if step is None:
            break
        best, sr, cur = step
    return Realised(cur, best, used)
