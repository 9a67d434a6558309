"""Queue order: who is admitted first and, with paced shares, who runs.

- `fifo`: arrival order (Kubernetes' default queue); a job that cannot
  start lets later ones pass. `fifo-strict`: the same order, but nothing
  passes a job that cannot start (Gavel's FIFO; `Board.behind`).
- `las`: least attained GPU service first, as Tiresias' discretised 2D-LAS:
  a job's level is the decade of its attained GPU-hours (under 1, 1-10,
  10-100, ...), lower levels first, arrival order within a level, so jobs of
  like service do not swap the GPU back and forth. Tiresias' starvation
  promotion is left out.
- `sd`: earliest slow-down deadline first. Job j's deadline at a slow-down
  target S is D_j = arrival_j + S * alone_j: the latest finish that keeps
  SD_j <= S. Earliest-deadline-first is optimal for such deadlines on one
  machine with free preemption, and minimising the largest SD (max
  stretch) this way is the classic result for it (Bender, Chakrabarti and
  Muthukrishnan, SODA 1998). S is the smallest target the *fluid* cluster
  meets (`sd_target`): every job runs at most at its exclusive speed, and
  the jobs due by any deadline fit into the GPU-seconds before it;
  bisection on S, recomputed every round. When the fluid cluster finishes
  every job as soon as it could alone S is 1 and the order is arrival
  order; as it falls behind S grows and short jobs move ahead, since a
  short job's SD grows fastest while it waits (dSD/dt = 1/alone). No
  starvation: for a given S a job's deadline is fixed, and S only grows
  while deadlines slip, so every waiting job eventually holds the earliest
  one.

  Two refinements, both measured on the shared mixes and on Gavel-style
  traces (bench/scheduler/README.md):
  * while the cluster is behind, a job on n GPUs gets the target
    S * min(sqrt(n), `WIDE_CAP`): a wide job holds many GPUs, and letting it
    wait a little longer than narrow ones shortens the mean completion time
    (the next objective) while its slow-down stays within `WIDE_CAP` times
    the target. Not while the fluid cluster keeps up (`keeps_up`): waiting
    then buys no better packing, and a short wide job waiting in a stream
    of 1-GPU jobs sets the largest slow-down (HISTORY.md round 27). Nor
    ever for a job wider than half the cluster (`wider_than_half`): no job
    as wide runs beside it, so its wait buys no packing either, only GPUs
    drained for it while narrower jobs go first (8 GPUs: five 8-GPU jobs
    waited behind later 6-GPU ones and one ended at 10.8x its time alone;
    HISTORY.md round 30);
  * no deadline lies past the makespan goal (`makespan_goal`), and jobs
    due then go longest first: a long job pushed to the end would run
    alone while the rest of the cluster idles (utilisation, the third
    objective). A job that needs every GPU overlaps with no other, so its
    place among them cannot shorten the makespan: such jobs go first, by
    their own deadlines.

Why not the split LP's instantaneous max-min (`sd-maxmin`): it assumes
every job keeps its current rate to the end, so it shares GPUs between a
short and a long job to equalise their *predicted* SDs; the short job
then really finishes late while the long one gains nothing. Two jobs of
1 and 10 GPU-hours arriving together on one GPU: equal shares give the
short one SD 2; deadline order gives SDs 1 and 1.1.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Sequence

import numpy as np

from gpufair.scheduler.policy.fleet import FleetJob

_BISECT = 40
WIDE_CAP = 1.5  # a wide job's slow-down target, at most this times the narrow jobs'
#: The makespan goal: the later of the last job's own finish (arrival plus
#: time alone, no slack: that job sets the makespan's lower bound, and on a
#: lightly loaded cluster every second it is held adds to the makespan) and
#: the remaining work packed onto the GPUs plus `MAKESPAN_SLACK` of it (less
#: past `SLACK_TARGET`). That
#: slack is on the work *left*, not on the time since the oldest job
#: arrived, which grows with that job's age however little work is left
#: (HISTORY.md rounds 11, 14 and 19).
MAKESPAN_SLACK = 0.5
#: Past this capacity target S (`capacity_target`) the goal's slack shrinks
#: as 1/S (slack x `SLACK_TARGET` / S). The slack lets short jobs go before
#: long ones at the makespan's expense: it spares a short job a delay, worth a
#: fraction 1/S of its slow-down, so a congested cluster gains little from it
#: and loses the makespan: three 16-GPU jobs ran one after another at the end
#: (HISTORY.md round 27).
SLACK_TARGET = 4.0
#: Wide jobs get no slack (`WIDE_CAP`) while the fluid cluster meets this slow-down.
KEEP_UP_SD = 2.0
LAS_QUANTUM_S = 3600.0  # the first LAS level: one GPU-hour of service


class Ranking(NamedTuple):
    """A round's queue order (indices, most urgent first) and what the `sd`
    rule's deadlines hang on: the slow-down target S, the makespan goal and
    the wide jobs' cap (unused by the other rules: 1, infinity, `WIDE_CAP`).
    A tuple, so a round unpacks it in one line."""

    order: list[int]
    target: float = 1.0
    goal: float = math.inf
    wide_cap: float = WIDE_CAP


def _fits(due: np.ndarray, work: np.ndarray, num_gpus: int) -> bool:
    """Does the fluid cluster finish the jobs by their `due` times (seconds
    from now), GPU-seconds of `work` each, most urgent first?"""
    order = np.argsort(due, kind="stable")
    return bool(np.all(np.cumsum(work[order]) <= num_gpus * due[order] * (1 + 1e-12)))


def _fluid(jobs: Sequence[FleetJob], now: float
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per job: seconds since arrival, time alone, time left, GPU-seconds left."""
    age = np.array([now - j.arrival_s for j in jobs])
    alone = np.array([j.alone_s() for j in jobs])
    rem = np.array([j.remaining_s() for j in jobs])
    return age, alone, rem, rem * np.array([j.num_gpus for j in jobs])


def _smallest(feasible: Callable[[float], bool], lower: float, upper: float) -> float:
    """The smallest S >= `lower` that is `feasible` (monotone; `upper` is)."""
    if feasible(lower):
        return lower
    upper = max(upper, lower) * 1.000001 + 1e-9
    for _ in range(_BISECT):
        mid = 0.5 * (lower + upper)
        lower, upper = (lower, mid) if feasible(mid) else (mid, upper)
        if upper - lower <= 1e-6 * upper:
            break
    return upper


def sd_target(jobs: Sequence[FleetJob], now: float, num_gpus: int) -> float:
    """The smallest slow-down S the fluid cluster meets (module docstring)."""
    if not jobs:
        return 1.0
    age, alone, rem, work = _fluid(jobs, now)
    return _smallest(lambda s: _fits(s * alone - age, work, num_gpus),
                     float(max(1.0, np.max((age + rem) / alone))),
                     float(np.max((work.sum() / num_gpus + age) / alone)))


def _on_capacity(fluid: tuple[np.ndarray, ...], num_gpus: int) -> Callable[[float], bool]:
    """Does the fluid cluster (`_fluid`'s arrays) meet slow-down S on
    capacity alone (a job is never due before it could finish alone from now)?"""
    age, alone, rem, work = fluid
    return lambda s: _fits(np.maximum(s * alone - age, rem), work, num_gpus)


def capacity_target(jobs: Sequence[FleetJob], now: float, num_gpus: int) -> float:
    """The smallest slow-down S the fluid cluster meets on capacity alone
    (`_on_capacity`). `sd_target` is at least every job's least reachable
    slow-down, so one short job that waited a minute can make it large; this
    one grows only when the GPUs cannot do the work in time."""
    if not jobs:
        return 1.0
    fluid = _fluid(jobs, now)
    age, alone, _, work = fluid
    return _smallest(_on_capacity(fluid, num_gpus), 1.0,
                     float(np.max((work.sum() / num_gpus + age) / alone)))


def keeps_up(jobs: Sequence[FleetJob], now: float, num_gpus: int) -> bool:
    """Does the fluid cluster meet slow-down `KEEP_UP_SD` on capacity alone
    (`_on_capacity`)? A waiting job's own wait does not make the cluster
    behind, or a wide job that waited would win back its slack by waiting."""
    return not jobs or _on_capacity(_fluid(jobs, now), num_gpus)(KEEP_UP_SD)


def makespan_goal(jobs: Sequence[FleetJob], now: float, num_gpus: int,
                  capacity: float = 1.0) -> float:
    """When the jobs present should all be done: no earlier than either of the
    makespan's lower bounds, every job alone from its arrival (no slack) and
    all remaining work packed onto the GPUs from now (`MAKESPAN_SLACK` of
    that work above it, less once `capacity`, the capacity target, passes
    `SLACK_TARGET`)."""
    if not jobs:
        return now
    longest = max(j.arrival_s + j.alone_s() for j in jobs)
    packed = sum(j.remaining_s() * j.num_gpus for j in jobs) / num_gpus
    slack = MAKESPAN_SLACK * min(1.0, SLACK_TARGET / capacity)
    return max(longest, now + (1 + slack) * packed)


def late_for_goal(job: FleetJob, now: float, goal: float) -> bool:
    """Has `job`'s latest start for finishing by the makespan goal come?
    Deadline order alone can leave such a job behind a stream of shorter
    ones with earlier deadlines: it cannot run faster than alone, so it then
    ends past the goal (`admission._claims` lets it start first). Never for
    a job whose length is a stand-in."""
    return job.length_known and goal - now - job.remaining_s() <= 0.0


def wider_than_half(job_gpus: int | np.ndarray, num_gpus: int) -> bool | np.ndarray:
    """Does a job on `job_gpus` GPUs need more than half of a cluster of
    `num_gpus` (0: unknown, never)? No other job as wide can run beside it.
    Elementwise for an array of widths."""
    if isinstance(job_gpus, np.ndarray):
        return (2 * job_gpus > num_gpus) & (num_gpus > 0)
    return 2 * job_gpus > num_gpus > 0


def deadline(job: FleetJob, target: float, goal: float, wide_cap: float,
             num_gpus: int = 0) -> float:
    """The `sd` rule's deadline of `job` at slow-down target `target` on a
    cluster of `num_gpus` GPUs (0: unknown) (`Ranking`)."""
    wide = 1.0 if wider_than_half(job.num_gpus, num_gpus) else min(math.sqrt(job.num_gpus),
                                                                   wide_cap)
    return min(job.arrival_s + target * wide * job.alone_s(), goal)


def las_level(attained_s: float) -> int:
    """Tiresias-style queue level: 0 under `LAS_QUANTUM_S` GPU-seconds, then one per decade."""
    if attained_s < LAS_QUANTUM_S:
        return 0
    return 1 + int(math.log10(attained_s / LAS_QUANTUM_S))


def job_key(job: FleetJob, rule: str, target: float = 1.0, goal: float = math.inf,
            num_gpus: int = 0, wide_cap: float = WIDE_CAP) -> tuple:
    """Sort key of `job` under `rule` (smaller: more urgent); `target`,
    `goal`, `num_gpus` and `wide_cap` are the `sd` rule's slow-down target,
    makespan goal, cluster size (0: unknown) and wide jobs' cap (`Ranking`)."""
    if rule in ("fifo", "fifo-strict"):
        return job.arrival_s, job.job
    if rule == "las":
        return las_level(job.attained_s), job.arrival_s, job.job
    due = deadline(job, target, goal, wide_cap, num_gpus)
    if due >= goal and job.num_gpus >= num_gpus > 0:  # whole-cluster (module docstring)
        return due, 0, deadline(job, target, math.inf, wide_cap, num_gpus), job.job
    return due, 1, -job.remaining_s(), job.job


def priority_order(jobs: Sequence[FleetJob], now: float, rule: str, num_gpus: int) -> Ranking:
    """`jobs` ranked under `rule` (`Ranking`)."""
    if rule != "sd":
        keys = [job_key(j, rule) for j in jobs]
        return Ranking(sorted(range(len(jobs)), key=keys.__getitem__))
    target = sd_target(jobs, now, num_gpus)
    goal = makespan_goal(jobs, now, num_gpus, capacity_target(jobs, now, num_gpus))
    wide_cap = 1.0 if keeps_up(jobs, now, num_gpus) else WIDE_CAP
    keys = [job_key(j, rule, target, goal, num_gpus, wide_cap) for j in jobs]
    return Ranking(sorted(range(len(jobs)), key=keys.__getitem__), target, goal, wide_cap)
