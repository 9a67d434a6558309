"""Placing a job under paced shares and `sd` placement: the rule one round
applies to each waiting job in turn, and the same rule for a job that
arrives between rounds, against what the last round left (`Outlook`), so a
newcomer starts at once without a whole round (O(GPUs), numpy only). Each
refinement below came from a traced cell; bench/scheduler/HISTORY.md has
the rounds named.

The polite rule (`paced_choice`). A newcomer may take GPU g when g has
room, it is more urgent than the job running there (or none runs), and it
holds nobody back for long: it needs at most `STACK_RATIO` of the time left
of each job resident on g, and they can afford that wait without passing
the makespan goal. GPUs are never taken back: a long newcomer would hold
the residents back to its end while the rest of the cluster could idle.
Among such GPUs `sd` placement takes those that least raise the slow-down
of the job held back (`placement.py`). Refinements:
- *Past the goal anyway*: where even the first GPUs that could be empty
  (`wait_start`) leave too little time before the goal, the goal does not
  keep it off a GPU whose work ahead is done by the time it could start by
  waiting (stacking ends no later than waiting), nor off one where it
  needs at most `STACK_RATIO` of the time left to the goal (a short stack
  pushes nobody far past it). Not off every GPU: an 86 h job stacked on
  one with 92 h left ran second, and both ended at 247 h against 195 h by
  waiting (rounds 34, 35).
- *Narrow residents*: the time-left test does not keep it off a GPU whose
  residents each use only it, where its slow-down by waiting would exceed
  every resident's least reachable one and be no lower than the slow-down
  the job it holds back there would reach (the goal's test still applies).
  Holding them back idles no other GPU, and a short wide job waiting for
  many 1-GPU jobs to empty at once set the largest slow-down (round 25).
- *Held wide residents* (a round only, `held`): a newcomer that waiting
  takes past the round's target counts, against a resident wider than
  half the cluster that more urgent jobs on its other GPUs hold back
  anyway, only the hold it adds. Only there: each credited newcomer
  lengthens the hold the next one meets (round 31).
- *Worn wide residents*: never onto a GPU of a multi-GPU resident whose
  least reachable slow-down (`worn`) has reached `WORN_SD` and `WORN_TARGET`
  of the round's target. Each stack is brief, but one after another they
  hold such a job back on all its GPUs: 45 short jobs held a 16-GPU job of
  10 minutes for an hour, its GPUs idle 9 % of the cluster's time (round
  45). Half the target, not `WORN_SD` alone: on a congested cluster every
  job passes 3, and short jobs had nowhere to stack (16 GPUs: 8-GPU jobs
  of 2 minutes waited 40; round 46). Only while waiting keeps the newcomer
  within the round's target: past it, the newcomer would be the one slowed
  down too far (a 35 s job waited 4 minutes for a 16-GPU one, SD 8.5;
  round 47).
- *Idle-aware refusal* (a round only): a polite set is refused where the
  residents it newly holds back (`gang`) idle more GPU time outside it
  (`idled`, over the newcomer's run) than `IDLE_RATIO` times its empty
  GPUs over its wait for GPUs to empty; not where waiting takes it past the
  round's target, as that wait is the slow-down the order exists to
  prevent. A resident held back already counts where the newcomer would
  outlast that hold: else short jobs stacked one after another on a 16-GPU
  job's free GPUs, each inside the hold the one before left (rounds 33-36,
  44).

Covering (`placement.covering`). A newcomer with no polite set may take
whole blocks: GPUs it is more urgent than whoever runs on, whose residents
have all their GPUs among them, so holding them back idles none of theirs.
It covers:
- *on a drain* (`drains`): where waiting would idle the GPUs that empty
  first, until the last one it needs does, longer in all than `COVER_RATIO`
  times its GPU time. A short job on few GPUs waits, as stacking would tie
  it to GPUs it may find busy. A job wider than half the cluster covers
  past `WIDE_COVER_RATIO`: no job as wide runs beside it, so the GPUs it
  waits for can only idle or run narrower jobs that leave before the last
  one empties (rounds 28, 30). This cover asks only that it be the more
  urgent there, not the goal's slack;
- *early* (a round only, `early_cover`): a job wider than half the cluster,
  on a drain idling more than `WIDE_EARLY_RATIO` of its GPU time, where
  every job it holds back ends within the round's target, no slower than
  it would by waiting and within the goal's slack (rounds 36, 41);
- *late* (a round only, `late_cover`): a newcomer that waiting takes past
  the round's target, where the residents held for its whole run end no
  slower than it would by waiting and within the goal's slack: its wait
  would set the largest slow-down (round 38). Where no such blocks add up
  to its GPUs, it may take blocks with up to `SPARE_RATIO` times its GPUs
  more, the extra ones idle while it runs (`late_spare`), once waiting takes
  it past `SPARE_TARGET` times the target, or past `SPARE_NEAR` times it
  after it has waited `SPARE_WAIT` times the exclusive time it needs
  (rounds 40, 42, 43).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from gpufair.scheduler.policy.board import Board, available_at, drain_idle, earliest_start
from gpufair.scheduler.policy.fleet import FleetJob, Interference, Levers
from gpufair.scheduler.policy.placement import choose, covering, gang_gpus
from gpufair.scheduler.policy.priority import job_key, wider_than_half

STACK_RATIO = 0.5
COVER_RATIO = 1.0
WIDE_COVER_RATIO = 0.5
WIDE_EARLY_RATIO = 0.1  # ... or this, where those it holds back stay within the target
SPARE_RATIO = 0.5  # GPUs a late cover may idle, per GPU it takes
SPARE_TARGET = 2.0  # ... only for a newcomer that waiting takes past this many times the target
SPARE_WAIT = 2.0  # ... or one that has waited this many times the exclusive time it needs
SPARE_NEAR = 1.25  # ... and that waiting takes past this many times the target
IDLE_RATIO = 4.0  # a newcomer stacks unless its residents idle this many times what waiting would
WORN_SD = 3.0  # no stacking on a multi-GPU resident whose least reachable slow-down reached this
WORN_TARGET = 0.5  # ... and this fraction of the round's target


@dataclass(frozen=True)
class Choice:
    """Where a newcomer may go: the GPUs (positions, ascending) or None; per
    GPU, whether it could run there at once (`free`), whether it would hold
    nobody back for long there (`polite`), and the SD of the job it would
    hold back (`score`); where a polite set was refused, the GPUs its
    residents would idle (`idles`); the newcomer's SD were it to wait for
    the first GPUs that could be empty (`waited`); whether only worn
    residents kept it off a polite set (`worn_only`)."""

    gpus: tuple[int, ...] | None
    free: np.ndarray
    polite: np.ndarray
    score: np.ndarray
    idles: int = 0
    waited: float = 0.0
    worn_only: bool = False


def paced_choice(job: FleetJob, room: np.ndarray, free: np.ndarray, shortest: np.ndarray,
                 slack: np.ndarray, held_sd: np.ndarray, held_per_s: np.ndarray,
                 count: np.ndarray, rng: np.random.Generator, node: np.ndarray | None = None,
                 cached: np.ndarray | None = None, gang: np.ndarray | None = None, *,
                 now: float, narrow: np.ndarray, resident_sd: float,
                 goal_left: float = np.inf, wait_from: float = 0.0,
                 held: np.ndarray | float = 0.0, target: float = np.inf,
                 worn: np.ndarray | None = None) -> Choice:
    """The module docstring's rule. Per GPU: `room` and `free` (bool), the
    shortest exclusive time left among its residents, how long they may be
    held (makespan), the held-back job's SD and 1/alone, (optional) which
    job it would newly hold back (`placement.choose`'s `gang`); the time
    the GPU state is for, the seconds from then to the makespan goal and
    until it could start if it waited; per GPU whether every resident
    there uses only that GPU (`narrow`), the largest of the residents'
    least reachable slow-downs (`Board.resident_sd`), the seconds its
    residents are held back anyway (`held`), the round's slow-down
    target, and where a worn resident sits (`worn`)."""
    rem = job.remaining_s()
    score = np.where(count == 0, 0.0, held_sd + rem * held_per_s)
    waited = job.sd_alone_from(now) + wait_from / job.alone_s() if job.alone_s() > 0 else 0.0
    adds = rem - held if waited > target else rem  # the hold it adds (module docstring)
    brief = adds <= STACK_RATIO * shortest
    if waited > resident_sd:
        brief |= narrow & (score <= waited)
    # Waiting ends past the goal anyway: stacking may too where the GPU's work
    # ahead (goal_left - slack) is done by the wait, or the newcomer is short.
    late = (wait_from + rem > goal_left) & ((slack >= goal_left - wait_from)
                                            | (rem <= STACK_RATIO * goal_left))
    polite = brief & ((adds <= slack) | late)
    ok = room & free
    worn_only = False
    if worn is not None and waited <= target:
        worn_only = bool((ok & polite).sum() >= job.num_gpus > (ok & polite & ~worn).sum())
        polite &= ~worn
    got = choose("sd", job.num_gpus, np.flatnonzero(ok & polite), count, rng, score, node,
                 cached, gang)
    if got is not None and gang is not None and waited <= target:
        idles = idled(got, gang)
        if idles * rem > IDLE_RATIO * int((count[list(got)] == 0).sum()) * wait_from:
            return Choice(None, ok, polite, score, idles, waited)
    return Choice(got, ok, polite, score, waited=waited, worn_only=worn_only)


def idled(got: Sequence[int], gang: np.ndarray) -> int:
    """The GPUs that the residents a newcomer on `got` newly holds back
    (`gang`, per GPU; -1: none) idle outside `got`: each one's GPUs in
    `gang` less those in `got`. Not its width: on a GPU where it is already
    held back, by jobs that run at least as long as the newcomer (`gang`
    names no one, or another job), it idles nothing more, as placement's
    `_fewest_idled` counts (the shared k80 w3 multi-GPU cell -2.0 -> within
    2 points of `k8s`'s busy time; HISTORY.md round 36)."""
    held = gang[list(got)]
    ids, taken = np.unique(held[held >= 0], return_counts=True)
    return int((gang_gpus(gang)[ids] - taken).sum())


def worn(job: FleetJob, now: float, target: float) -> bool:
    """Is `job` a multi-GPU job that newcomers no longer stack on (module
    docstring: its least reachable slow-down has reached `WORN_SD` and
    `WORN_TARGET` times the round's `target`)?"""
    return job.num_gpus > 1 and job.sd_alone_from(now) >= max(WORN_SD, WORN_TARGET * target)


def wait_start(empty_at: np.ndarray, room: np.ndarray, need: int) -> float:
    """Seconds from now until `need` GPUs with room could be empty (at the soonest)."""
    if room.sum() < need:
        return float("inf")
    return float(np.partition(empty_at[room], need - 1)[need - 1])


def late_cover(job: FleetJob, choice: Choice, slack: np.ndarray, target: float) -> np.ndarray:
    """The GPUs whose residents a late newcomer may hold back for its whole
    run (module docstring): where it could run at once (`choice.free`), the
    job it holds back would end no slower than it would by waiting
    (`choice.score <= choice.waited`) and within the makespan goal's
    `slack`. Empty unless waiting would take the newcomer past the round's
    slow-down `target`."""
    if choice.waited <= target:
        return np.zeros_like(choice.free)
    return _coverable(job, choice, slack, choice.waited)


def _coverable(job: FleetJob, choice: Choice, slack: np.ndarray, sd: float) -> np.ndarray:
    """Where `job` could run at once and the job it holds back there for its
    whole run would end at slow-down `sd` or less and within the makespan
    goal's `slack`."""
    return choice.free & (choice.score <= sd) & (slack >= job.remaining_s())


def late_spare(job: FleetJob, choice: Choice, target: float, now: float) -> int:
    """How many GPUs a late cover may idle beyond the ones `job` takes: none
    unless waiting would take it past `SPARE_TARGET` times the round's
    slow-down `target`, or past `SPARE_NEAR` times it once it has waited
    `SPARE_WAIT` times the exclusive time it still needs (module docstring)."""
    long_wait = (now - job.arrival_s >= SPARE_WAIT * job.remaining_s()
                 and choice.waited > SPARE_NEAR * target)
    if choice.waited <= SPARE_TARGET * target and not long_wait:
        return 0
    return int(SPARE_RATIO * job.num_gpus)


def drains(job: FleetJob, room: np.ndarray, empty_at: np.ndarray,
           ratio: float | None = None) -> bool:
    """Would the GPUs `job` waits for idle, until the last of them empties,
    longer in all than `ratio` times its own GPU time (default `COVER_RATIO`,
    `WIDE_COVER_RATIO` for a job wider than half the cluster; module
    docstring)? Arrays by GPU."""
    n = job.num_gpus
    if room.sum() < n:
        return False
    if ratio is None:
        ratio = WIDE_COVER_RATIO if wider_than_half(n, len(room)) else COVER_RATIO
    return drain_idle(empty_at[room], n) > ratio * n * job.remaining_s()


def early_cover(job: FleetJob, choice: Choice, room: np.ndarray, empty_at: np.ndarray,
                slack: np.ndarray, target: float) -> np.ndarray:
    """The GPUs whose residents a job wider than half the cluster may hold
    back for its whole run on a drain that idles more than `WIDE_EARLY_RATIO`
    of its GPU time (module docstring): where it could run at once
    (`choice.free`) and the job it holds back would end within the round's
    slow-down `target`, no slower than the newcomer would by waiting
    (`choice.waited`), and within the makespan goal's `slack`. Empty
    otherwise."""
    if not (wider_than_half(job.num_gpus, len(room))
            and drains(job, room, empty_at, WIDE_EARLY_RATIO)):
        return np.zeros_like(choice.free)
    return _coverable(job, choice, slack, min(target, choice.waited))


def hold_back_reason(job: FleetJob, choice: Choice, running: Sequence[str]) -> str:
    """Why `job` cannot start although room exists (after `paced_choice` said None)."""
    n = job.num_gpus
    if choice.idles:
        return (f"would hold back jobs whose other {choice.idles} GPUs would then idle, "
                f"more than waiting for empty GPUs idles")
    if choice.worn_only:
        return "would hold back multi-GPU jobs slowed down too far already"
    if choice.free.sum() >= n:
        # Not polite there: it needs more than `STACK_RATIO` of a resident's time left,
        # or would hold one past the makespan goal (the module docstring's rule).
        worst = float(np.sort(choice.score[choice.free])[n - 1])
        rise = f" (their max SD would rise to {worst:.2f})" if worst > 0 else ""
        return f"would hold back the jobs on every GPU set it could run on too long{rise}"
    ahead = sorted(set(running))
    if not ahead:
        return "behind more urgent jobs"
    more = ", ..." if len(ahead) > 3 else ""
    return f"behind more urgent jobs: {', '.join(ahead[:3])}{more}"


@dataclass(frozen=True)
class Outlook:
    """What a paced round left on every GPU (arrays by GPU position)."""

    levers: Levers
    now: float
    target: float
    goal: float
    names: tuple[str, ...]
    node: np.ndarray | None
    count: np.ndarray
    models: tuple[frozenset[str], ...]
    shortest: np.ndarray
    slack: np.ndarray
    busy_until: np.ndarray
    runner_key: tuple[tuple | None, ...]
    runner_name: tuple[str, ...]
    runner_sd: np.ndarray
    runner_per_s: np.ndarray
    reserved: np.ndarray
    release_s: float
    goal_left: float  # seconds to the makespan goal the slack counts to
    empty_at: np.ndarray  # seconds until each GPU could be empty
    widest: np.ndarray  # GPUs of the widest job resident on each GPU
    blocks: np.ndarray  # each GPU's block (`placement.block_labels`)
    resident_sd: float  # `Board.resident_sd`
    wide_cap: float  # `priority.Ranking.wide_cap`
    worn: np.ndarray  # GPUs holding a worn resident (`worn`)
    blocked_by: str = ""  # `fifo-strict`: the waiting job nothing may pass


@dataclass(frozen=True)
class Arrival:
    """Where an arriving job goes now (GPU names), or why it waits."""

    gpus: tuple[str, ...] | None
    reason: str
    predicted_start_s: float


def outlook(board: Board, look: object) -> Outlook:
    """The round's end state (`look`: the paced round's `_GpuState`)."""
    n = len(board.gpus)
    runners = look.runner  # type: ignore[attr-defined]
    sd, per_s = np.zeros(n), np.zeros(n)
    keys: list[tuple | None] = [None] * n
    for g, job in enumerate(runners):
        if job is not None:
            # A resident lifted ahead of the job it blocks is as urgent as that job.
            keys[g] = job_key(board.lifted.get(job.job, job), board.levers.queue, board.target,
                              board.goal, n, board.wide_cap)
            sd[g] = job.sd_alone_from(board.now)
            per_s[g] = 1.0 / job.alone_s()
    return Outlook(board.levers, board.now, board.target, board.goal,
                   tuple(g.name for g in board.gpus), board.node, board.count.copy(),
                   tuple(frozenset(m) for m in board.models), look.shortest.copy(),
                   look.slack.copy(), look.busy_until.copy(), tuple(keys),
                   tuple(j.job if j else "" for j in runners), sd, per_s,
                   board.reserved.copy(), board.release_s,
                   look.goal - board.now, look.empty_at.copy(),  # type: ignore[attr-defined]
                   board.widest.copy(), board.blocks(), board.resident_sd, board.wide_cap,
                   look.worn.copy(),  # type: ignore[attr-defined]
                   board.blocked_by.job if board.blocked_by else "")


def place_arrival(view: Outlook, job: FleetJob, interference: Interference,
                  seed: int = 0) -> Arrival:
    """Place `job` (waiting) against the last round's outlook (module docstring)."""
    if view.blocked_by:
        return Arrival(None, f"behind {view.blocked_by}: strict FIFO lets no job pass an "
                             f"earlier one", float("inf"))
    cap = view.levers.max_per_gpu
    compat = np.array([all(interference.compatible(job.model, m) for m in there)
                       for there in view.models], dtype=bool)
    allowed = np.array([not job.gpus_allowed or name in job.gpus_allowed
                        for name in view.names], dtype=bool)
    room = (view.count < cap) & compat & allowed
    if job.remaining_s() > view.release_s:
        room &= ~view.reserved
    # The goal is never before a job's own finish alone: one that would end last moves it.
    mine = job_key(job, view.levers.queue, view.target,
                   max(view.goal, job.arrival_s + job.alone_s()), len(view.names),
                   view.wide_cap)
    free = np.array([k is None or mine < k for k in view.runner_key], dtype=bool)
    held_sd = np.where(free, view.runner_sd, 0.0)
    held_per_s = np.where(free, view.runner_per_s, 0.0)
    choice = paced_choice(job, room, free, view.shortest, view.slack, held_sd, held_per_s,
                          view.count, np.random.default_rng(seed), view.node,
                          goal_left=view.goal_left,
                          wait_from=wait_start(view.empty_at, room, job.num_gpus),
                          now=view.now, narrow=view.widest <= 1,
                          resident_sd=view.resident_sd, target=view.target, worn=view.worn)
    got = choice.gpus
    if got is None and drains(job, room, view.empty_at):
        got = covering(view.blocks, room & free, view.count > 0, job.num_gpus)
    if got is not None:
        return Arrival(tuple(view.names[g] for g in got), "placed", 0.0)
    start = earliest_start(available_at(view.busy_until, view.empty_at, compat, allowed),
                           job.num_gpus)  # as `Board.wait` estimates it
    if room.sum() < job.num_gpus:
        return Arrival(None, f"no room: too few GPUs hold under {cap} jobs it may share",
                       start)
    running = [view.runner_name[g] for g in np.flatnonzero(room & ~free)]
    return Arrival(None, hold_back_reason(job, choice, running), start)
