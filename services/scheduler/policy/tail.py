"""The tail: once every waiting job is due at the makespan goal, pack them.

A job whose slow-down deadline lies past the makespan goal is due at the
goal (`priority.deadline`): its slow-down no longer decides its place, the
makespan does. When every waiting job is such a job (the last jobs of a
busy stretch, typically), the deadline order says only "longest first",
and the round's walk starts whichever of them fits on the GPUs that happen
to be empty. With gangs of 4-16 GPUs that leaves holes: narrow jobs take
GPUs as they free, a 16-GPU job waits for 16 to empty at once, and three
such jobs end up running one after another at the end while half the
cluster idles (bench/scheduler/HISTORY.md rounds 13, 23 and 24).

So the round plans them instead, as rigid gangs on the GPUs' empty times
(`_GpuState.empty_at`: paced residents run one at a time):
- list scheduling: in a given order each job takes the `num_gpus` GPUs that
  empty first and starts when the last of them does (`list_schedule`);
- orders tried: the round's own, longest first, largest GPU-time first,
  widest first, then single moves of one job to another place while they
  shorten the makespan (then the summed finish times), up to `MOVES`;
- then an exact search from the best of those (`_branch_and_bound`): single
  moves stall where no one move shortens the makespan (three 16-GPU jobs
  and four narrow ones: 4,468 s where 3,930 s was possible;
  bench/scheduler/HISTORY.md round 26);
- both within a budget of jobs placed times GPUs (`MOVE_CELLS`,
  `SEARCH_CELLS`): a placement costs time in proportion to the GPUs, and a
  round on 4,096 GPUs must still decide in milliseconds, so there the plan
  tries little past the four orders;
- a plan may not finish a job with a higher slow-down than the round's own
  order would, unless that stays under the round's slow-down target (at
  least the slow-down every job, resident or not, is already bound to;
  `sd_limits`): the largest slow-down comes first, the makespan third;
- the jobs the best plan starts now are placed on its GPUs (empty ones),
  the others wait, with the planned start as their predicted one.
The plan is made again every round, so a job that arrives meanwhile, or
ends sooner or later than predicted, changes it. Only for a handful of jobs
(`MAX_JOBS`; a round of 1,000 jobs must decide in milliseconds), only when
every waiting job has a known length and may go on any GPU.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from gpufair.scheduler.policy.fleet import FleetJob

MAX_JOBS = 32  # waiting jobs; past that the tail is not near, and planning costs
MOVES = 300  # single-job moves tried per round
#: What a plan may spend past the four orders, in jobs placed times GPUs (a
#: placement's cost grows with the GPUs): the moves up to `MOVES` of
#: `MAX_JOBS` jobs on 32 GPUs (2 moves of 32 jobs on 4,096), then the exact
#: search 1,000 placements on 32 GPUs (about 8 times that moved one benchmark
#: grid cell by 0.6 points and nearly doubled the slowest cell's simulation).
MOVE_CELLS = MOVES * MAX_JOBS * 32
SEARCH_CELLS = 32_000


class Schedule(NamedTuple):
    """A list schedule: makespan and summed finishes (seconds from now), and
    per job its start, its GPUs and its slow-down at the planned finish."""

    makespan: float
    finishes: float
    starts: np.ndarray
    gpus: tuple[np.ndarray, ...]
    sd: np.ndarray


def list_schedule(empty_at: np.ndarray, widths: np.ndarray, rems: np.ndarray,
                  ages: np.ndarray, alones: np.ndarray, order: Sequence[int]) -> Schedule:
    """Jobs in `order`, each on the `widths[k]` GPUs that empty first, from the
    last of them to `rems[k]` later. `ages`: seconds since each job arrived;
    `alones`: its time alone (for its slow-down at the planned finish)."""
    free = empty_at.copy()
    starts, sd = np.zeros(len(widths)), np.zeros(len(widths))
    gpus: list[np.ndarray] = [np.zeros(0, dtype=int)] * len(widths)
    for k in order:
        pick = np.argpartition(free, widths[k] - 1)[:widths[k]]
        start = float(free[pick].max())
        free[pick] = start + rems[k]
        starts[k], gpus[k] = start, np.sort(pick)
        sd[k] = (ages[k] + start + rems[k]) / alones[k]
    return Schedule(float(free.max()), float(np.sum(starts + rems)), starts, tuple(gpus), sd)


def sd_limits(own: Schedule, bound: float) -> np.ndarray:
    """Per job, the highest slow-down a plan may finish it with: what the
    round's own order gives it, or `bound` (the caller's: the round's
    target) if that is higher."""
    return np.maximum(own.sd, bound)


def _better(a: Schedule, b: Schedule) -> bool:
    eps = 1e-6 * max(1.0, b.makespan)
    return a.makespan < b.makespan - eps or (a.makespan <= b.makespan + eps
                                             and a.finishes < b.finishes - eps)


def plan_tail(waiting: Sequence[FleetJob], empty_at: np.ndarray, now: float,
              bound: float) -> Schedule | None:
    """The best plan for `waiting` (in the round's order) on GPUs that empty
    at `empty_at` (seconds from now); None where the tail does not apply."""
    n = len(waiting)
    if not 2 <= n <= MAX_JOBS or any(not j.length_known or j.gpus_allowed
                                     or j.num_gpus > len(empty_at) for j in waiting):
        return None
    widths = np.array([j.num_gpus for j in waiting])
    rems = np.array([j.remaining_s() for j in waiting])
    ages = np.array([now - j.arrival_s for j in waiting])
    alones = np.array([j.alone_s() for j in waiting])

    def schedule(order: Sequence[int]) -> Schedule:
        return list_schedule(empty_at, widths, rems, ages, alones, order)

    own = schedule(range(n))
    limit = sd_limits(own, bound) * (1 + 1e-9)
    best, best_order = own, list(range(n))
    for order in (sorted(range(n), key=lambda k: -rems[k]),
                  sorted(range(n), key=lambda k: -rems[k] * widths[k]),
                  sorted(range(n), key=lambda k: (-widths[k], -rems[k]))):
        plan = schedule(order)
        if np.all(plan.sd <= limit) and _better(plan, best):
            best, best_order = plan, order
    budget = MOVE_CELLS // len(empty_at)  # jobs placed
    moves, improved = 0, True
    while improved and moves < MOVES and budget >= n:  # first improving move, then start over
        improved = False
        for a, b in ((a, b) for a in range(n) for b in range(n) if a != b):
            order = best_order[:a] + best_order[a + 1:]
            order.insert(b, best_order[a])
            plan = schedule(order)
            moves, budget = moves + 1, budget - n
            if np.all(plan.sd <= limit) and _better(plan, best):
                best, best_order, improved = plan, order, True
                break
            if moves >= MOVES or budget < n:
                break
    order = _branch_and_bound(empty_at, widths, rems, ages, alones, limit, best,
                              SEARCH_CELLS // len(empty_at))
    return best if order is None else schedule(order)


def _branch_and_bound(empty_at: np.ndarray, widths: np.ndarray, rems: np.ndarray,
                      ages: np.ndarray, alones: np.ndarray, limit: np.ndarray,
                      incumbent: Schedule, budget: int) -> list[int] | None:
    """An order whose list schedule is better than `incumbent` (`_better`)
    with every job within `limit`, or None: depth-first over the next job to
    place, at most `budget` placements. Exact when the budget lasts.

    A partial plan is the GPUs' sorted free times (the next job takes the
    first `width` of them, as `list_schedule` does). No completion ends
    before the latest of them, before the free times plus the work left
    spread over every GPU, or before any job left starts on its own first
    `width` GPUs and runs; a branch whose bound passes the best makespan
    found is cut. Two partial plans with the same jobs placed and the same
    free times have the same completions: only the one with the smaller
    summed finishes is searched."""
    n, n_gpu = len(widths), len(empty_at)
    area = widths * rems
    tol = 1e-6 * max(1.0, incumbent.makespan)  # as `_better`
    best_makespan, best_finishes = incumbent.makespan, incumbent.finishes
    best_order: list[int] | None = None
    seen: dict[tuple[bytes, bytes], float] = {}

    def visit(free: np.ndarray, order: list[int], left: np.ndarray, finishes: float,
              work: float) -> None:
        nonlocal best_makespan, best_finishes, best_order, budget
        if not len(left):
            mk = float(free[-1])
            if mk < best_makespan - tol or (mk <= best_makespan + tol
                                            and finishes < best_finishes - tol):
                best_makespan, best_finishes, best_order = mk, finishes, order
            return
        starts = free[widths[left] - 1]
        children = []
        for i in np.flatnonzero((ages[left] + starts + rems[left]) / alones[left] <= limit[left]):
            if budget <= 0:
                break
            budget -= 1
            k, end = left[i], starts[i] + rems[left[i]]
            after = free.copy()
            after[:widths[k]] = end
            after.sort()
            rest = np.delete(left, i)
            bound = max(after[-1], (after.sum() + work - area[k]) / n_gpu,
                        float((after[widths[rest] - 1] + rems[rest]).max(initial=0.0)))
            children.append((bound, finishes + end, int(k), after, rest))
        children.sort(key=lambda c: (c[0], c[1]))
        for bound, done, k, after, rest in children:
            if bound > best_makespan + tol:
                break
            key = (np.round(after, 3).tobytes(), rest.tobytes())
            if seen.get(key, np.inf) <= done + tol:
                continue
            seen[key] = done
            visit(after, [*order, k], rest, done, work - area[k])

    visit(np.sort(empty_at.astype(float)), [], np.arange(n), 0.0, float(area.sum()))
    return best_order
