"""One scheduling round: admission, placement and GPU shares (pure).

`plan_round` orders every job, waiting or resident, most urgent first
(`priority.py`). Under time-slicing it admits waiting jobs onto GPUs with
room (`sliced.py`). With paced shares it walks the order once:
- a resident job runs alone on its GPUs if nothing more urgent was given
  time on any of them, else it is held at a step boundary (`paced.Filler`);
- a waiting job is placed when its turn comes. Under the `sd` placement
  only onto GPUs where it runs at once and holds nobody back for long (the
  rule, with its reasons: `arrival.py`); a job with no such set waits, since
  admitting it later keeps its choice of GPUs open and GPUs are never taken
  back. Other placement rules admit onto any GPUs with room; the shares
  then decide who runs.
A resident job that is not ready (its trainers still starting) keeps its
GPUs but gets no time this round. Then the held jobs, most urgent first,
may borrow slivers of their busy
GPUs to use their idle ones (`Filler.lend`), never from a job that a more
urgent held job waits for: slowing it would delay that job too.

No starvation: under the `sd` queue the most urgent job that cannot start
gets a reservation once it is at risk (`board.RESERVE_LAXITY`), or, wider
than half the cluster and able to share too few GPUs, once it starves
(`Board.starving`), and later jobs use its GPUs only when they will be done
before it can start (EASY backfilling). If it cannot share a GPU with the
jobs there (a pair measured unable to co-run), it waits for GPUs to empty,
and their residents take its place in the order (`Board.inherit`): else
pacing holds them back for less urgent jobs and the GPUs do not empty (a
redrawn GPU type with a fifth of its pairs unable to co-run: a 30 s job
waited 23 minutes; bench/scheduler/HISTORY.md round 28). Before the walk,
a waiting job whose latest start for the makespan goal has come takes
empty GPUs whatever its place in the order, unless a more urgent waiting
job would then start later and end past its deadline, one already past it
included (`_claims`):
the order is by slow-down deadline, and a week-long job due at the goal
otherwise waits out every shorter job due before it and ends past the goal
(Gavel-style traces: 19 % past it; bench/scheduler/HISTORY.md round 13).
When every waiting job is due at the makespan goal, their order no longer
serves slow-downs, only the makespan: the round then starts just those
that a packing of them as rigid gangs starts now (`tail.py`, `_tail`) and
queues the others with their planned starts.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from gpufair.scheduler.policy.arrival import drains, early_cover, hold_back_reason, late_cover, \
    late_spare, outlook, paced_choice, wait_start, worn
from gpufair.scheduler.policy.board import Board
from gpufair.scheduler.policy.fleet import FleetJob, Gpu, Interference, Levers, NoInterference, \
    RoundPlan, validate_fleet
from gpufair.scheduler.policy.paced import Filler
from gpufair.scheduler.policy.placement import choose, covering
from gpufair.scheduler.policy.priority import deadline, late_for_goal, makespan_goal, \
    wider_than_half
from gpufair.scheduler.policy.sliced import sliced_round
from gpufair.scheduler.policy.tail import plan_tail

_FULL = 1 - 1e-9
_TAIL_REASON = ("every waiting job is due at the makespan goal: it starts when the plan "
                "that ends them soonest starts it")


class _GpuState:
    """Per GPU, what a newcomer meets there: the residents' exclusive time
    left (shortest, and until the GPU empties), how long they may be held
    before the makespan goal, the next resident that would run (its
    predicted SD and how fast a delay raises it), when the job given
    time there is done, whether a job there is still starting, and
    whether a worn job sits there (`arrival.worn`)."""

    def __init__(self, board: Board) -> None:
        jobs, n_gpu = board.jobs, len(board.gpus)
        goal = makespan_goal(jobs, board.now, n_gpu) if board.levers.queue != "sd" \
            else board.goal
        self.shortest = np.full(n_gpu, np.inf)
        self.empty_at = np.zeros(n_gpu)
        self.work = np.zeros(n_gpu)  # the residents' exclusive time left, summed
        self.slack = np.full(n_gpu, np.inf)
        self.goal = goal  # the makespan goal the slack counts to
        self.busy_until = np.zeros(n_gpu)
        self.top_sd, self.top_per_s = np.zeros(n_gpu), np.zeros(n_gpu)
        self.runner: list[FleetJob | None] = [None] * n_gpu  # the job given the GPU
        self._queues = [sorted(r, key=lambda i: board.rank[jobs[i].job])
                        for r in board.residents]
        self._head = [0] * n_gpu
        self._done: set[int] = set()
        self._board = board
        self._members: np.ndarray | None = None  # `_member_arrays`, built on first use
        for g, there in enumerate(board.residents):
            if there:
                self.resident(g, [jobs[k].remaining_s() for k in there])
            self._top(g)
        # GPUs of jobs still starting: late covering leaves them alone (`_place`);
        # of worn jobs: no newcomer stacks there politely (`arrival.worn`).
        self.starting = np.zeros(n_gpu, dtype=bool)
        self.worn = np.zeros(n_gpu, dtype=bool)
        for job in jobs:
            if not job.gpus:
                continue
            ranks = [board.pos[g] for g in job.gpus]
            if not job.ready:
                self.starting[ranks] = True
            self.wear(job, ranks)

    def wear(self, job: FleetJob, gpus: Sequence[int]) -> None:
        """`job` is resident on `gpus`: mark them if it is worn."""
        if worn(job, self._board.now, self._board.target):
            self.worn[list(gpus)] = True

    def resident(self, g: int, rems: list[float]) -> None:
        """Jobs needing `rems` seconds more sit on GPU g. Paced, they run there
        one at a time, so the last is done no sooner than their sum from now:
        that is when g can empty, and what is left of it to the makespan goal
        is how long a newcomer may hold them back."""
        self.shortest[g] = min(self.shortest[g], *rems)
        self.work[g] += sum(rems)
        self.empty_at[g] = self.work[g]
        self.slack[g] = self.goal - self._board.now - self.work[g]

    def _top(self, g: int) -> None:
        q, jobs = self._queues[g], self._board.jobs
        while self._head[g] < len(q) and q[self._head[g]] in self._done:
            self._head[g] += 1
        if self._head[g] == len(q):
            self.top_sd[g] = self.top_per_s[g] = 0.0
            return
        k = jobs[q[self._head[g]]]
        self.top_sd[g] = k.sd_alone_from(self._board.now)
        self.top_per_s[g] = 1.0 / k.alone_s()

    def gangs(self, free: np.ndarray, seconds: float) -> np.ndarray:
        """Per GPU, the job a newcomer needing `seconds` there would hold back
        longer, as its index (-1: none; an empty GPU, or its next resident is
        already held back on another of its GPUs, by jobs that run at least
        that long, so its GPUs idle that long anyway)."""
        heads = np.array([q[h] if h < len(q) else -1 for q, h in zip(self._queues, self._head)],
                         dtype=int)
        # A head not held back anywhere is held until 0 s, which any newcomer outlasts.
        longer = seconds > self._held_until(free)[heads]
        return np.where((heads >= 0) & longer, heads, -1)

    def _held_until(self, free: np.ndarray) -> np.ndarray:
        """Per job index (and one more, for none: 0), the seconds until the last
        job given time on a GPU of its own that is not `free` is done."""
        job, gpu = self._member_arrays()
        until = np.zeros(len(self._board.jobs) + 1)
        np.maximum.at(until, job, np.where(free[gpu], 0.0, self.busy_until[gpu]))
        return until

    def _member_arrays(self) -> np.ndarray:
        """(job index, GPU position) per rank of the jobs resident at the round's start."""
        if self._members is None:
            board = self._board
            self._members = np.array([(i, board.pos[g]) for i, j in enumerate(board.jobs)
                                      for g in j.gpus], dtype=int).reshape(-1, 2).T
        return self._members

    def held(self, free: np.ndarray) -> np.ndarray:
        """Per GPU nothing runs on (`free`) that holds a job wider than half
        the cluster, the seconds its residents are held back anyway: each
        until the last job given time on its other GPUs is done, the least
        of that over them (0 where one is not held, and on every other GPU;
        jobs placed this round are held by nobody yet)."""
        board = self._board
        wide = wider_than_half(board.widest, len(free))
        if not wide.any():
            return np.zeros(len(free))
        job, gpu = self._member_arrays()
        out = np.full(len(free), np.inf)
        np.minimum.at(out, gpu, self._held_until(free)[job])
        for gpus in board.admitted.values():
            out[[board.pos[g] for g in gpus]] = 0.0
        return np.where(free & wide & np.isfinite(out), out, 0.0)

    def handled(self, index: int, gpus: Sequence[int], ran: bool) -> None:
        """Job `index` had its turn on `gpus` (and ran there or not)."""
        self._done.add(index)
        rem = self._board.jobs[index].remaining_s()
        for g in gpus:
            if ran:
                self.busy_until[g] = max(self.busy_until[g], rem)
                self.runner[g] = self._board.jobs[index]
            self._top(g)


def _place(board: Board, job: FleetJob, filler: Filler, look: _GpuState
           ) -> tuple[int, ...] | None:
    """GPUs for waiting `job` now, or None after queueing it (module docstring)."""
    if board.behind(job):
        return None
    room = board.room(job)
    if board.levers.placement != "sd":
        got = choose(board.levers.placement, job.num_gpus, np.flatnonzero(room), board.count,
                     board.rng)
        if got is None:
            board.wait(job, look.empty_at, "no room", look.empty_at)
        return got
    room &= board.backfill(job.remaining_s())
    free = filler.left >= _FULL
    choice = paced_choice(job, room, free, look.shortest, look.slack,
                          look.top_sd, look.top_per_s, board.count, board.rng, board.node,
                          board.cached(job), look.gangs(free, job.remaining_s()),
                          goal_left=look.goal - board.now,
                          wait_from=wait_start(look.empty_at, room, job.num_gpus),
                          now=board.now, narrow=board.widest <= 1, resident_sd=board.resident_sd,
                          held=look.held(free), target=board.target, worn=look.worn)
    if choice.gpus is not None:
        return choice.gpus
    if drains(job, room, look.empty_at):  # whole blocks instead (`arrival.py`)
        got = covering(board.blocks(), room & free, board.count > 0, job.num_gpus)
        if got is not None:
            return got
    # A starting job's slow-down clock stands still until it steps (`fleetview`), so
    # holding it back would look free, and its trainers are launching: not covered.
    early = early_cover(job, choice, room, look.empty_at, look.slack, board.target)
    early &= ~look.starting
    if early.any():  # a shorter drain, those held back no slower (`arrival.py`)
        got = covering(board.blocks(), early, board.count > 0, job.num_gpus)
        if got is not None:
            return got
    late = late_cover(job, choice, look.slack, board.target) & ~look.starting
    if late.any():  # waiting would set the largest SD: whole blocks (`arrival.py`)
        got = covering(board.blocks(), late, board.count > 0, job.num_gpus,
                       late_spare(job, choice, board.target, board.now))
        if got is not None:
            return got
    running = [name for g in np.flatnonzero(room) for name in filler.running(g)]
    board.wait(job, np.where(choice.polite, look.busy_until, look.empty_at),
               hold_back_reason(job, choice, running), look.empty_at)
    return None


def _claims(board: Board, look: _GpuState) -> dict[int, tuple[int, ...]]:
    """Waiting jobs late for the makespan goal (`priority.late_for_goal`),
    placed on empty GPUs ahead of the order (module docstring). Empty GPUs
    only, so nobody is held back for them; and only where no more urgent
    waiting job would start later and end past its deadline, starting on
    the GPUs left or on the claimed ones once the late job is done. One that
    cannot claim waits its turn."""
    claims: dict[int, tuple[int, ...]] = {}
    if board.levers.queue != "sd" or board.levers.placement != "sd":
        return claims
    for at, i in enumerate(board.order):
        job = board.jobs[i]
        if not (job.waiting and late_for_goal(job, board.now, board.goal)):
            continue
        room = board.room(job) & (board.count == 0) & board.backfill(job.remaining_s())
        got = choose("sd", job.num_gpus, np.flatnonzero(room), board.count, board.rng,
                     node=board.node, cached=board.cached(job))
        if got is not None and _affordable(board, look, board.order[:at], got, job.remaining_s()):
            board.admit(i, got)
            claims[i] = got
    return claims


def _tail(board: Board, look: _GpuState, claims: dict[int, tuple[int, ...]]
          ) -> tuple[dict[int, tuple[int, ...]], dict[int, float]]:
    """When every waiting job is due at the makespan goal, the jobs the tail
    plan (`tail.py`) starts now, with their GPUs, and when it starts the
    others (seconds from now). A job it starts now on GPUs it may not join
    after all goes through the walk."""
    if board.levers.queue != "sd" or board.levers.placement != "sd":
        return {}, {}
    waiting = [i for i in board.order if board.jobs[i].waiting and i not in claims]
    cluster = len(board.gpus)
    if any(deadline(board.jobs[i], board.target, board.goal, board.wide_cap, cluster) < board.goal
           for i in waiting):
        return {}, {}
    empty_at = look.empty_at.copy()
    for i, got in claims.items():
        empty_at[list(got)] = board.jobs[i].remaining_s()
    # A plan may end a waiting job as late as the round's target allows (at least
    # every job's least reachable slow-down, a resident's too), or as its own
    # order does (`tail.sd_limits`).
    plan = plan_tail([board.jobs[i] for i in waiting], empty_at, board.now, board.target)
    if plan is None:
        return {}, {}
    now, later = {}, {}
    for k, i in enumerate(waiting):
        got = tuple(int(g) for g in plan.gpus[k])
        if plan.starts[k] > 0:
            later[i] = float(plan.starts[k])
        elif (board.room(board.jobs[i])[list(got)]).all() and (board.count[list(got)] == 0).all():
            now[i] = got
    return now, later


def _affordable(board: Board, look: _GpuState, ahead: Sequence[int], got: tuple[int, ...],
                seconds: float) -> bool:
    """Does no waiting job in `ahead` start later with GPUs `got` busy for
    `seconds` more and then end past its slow-down deadline? A job already
    past its deadline counts too: waiting longer only makes it later."""
    later = look.empty_at.copy()
    later[list(got)] = np.maximum(later[list(got)], seconds)
    for k in ahead:
        other = board.jobs[k]
        if not other.waiting or other.job in board.admitted:
            continue
        due = deadline(other, board.target, board.goal, board.wide_cap, len(board.gpus)) \
            - board.now - other.remaining_s()
        room = board.room(other)
        delayed = wait_start(later, room, other.num_gpus)
        if due < delayed and wait_start(look.empty_at, room, other.num_gpus) < delayed:
            return False
    return True


def _paced(board: Board) -> RoundPlan:
    lv = board.levers
    filler = Filler(len(board.gpus), board.interference, lv.min_share,
                    joint=lv.split != "even", now=board.now, sd_cap=board.target)
    board.inherit()
    look = _GpuState(board)
    held: list[tuple[FleetJob, list[int]]] = []
    starting: dict[str, tuple[float, ...]] = {}  # placed now, stepping later: what they will get
    claims = _claims(board, look)
    tail_now, tail_later = _tail(board, look, claims)
    for i, got in tail_now.items():
        board.admit(i, got)
    claims.update(tail_now)
    for i in [*claims, *(i for i in board.order if i not in claims)]:
        job = board.jobs[i]
        if i in tail_later:
            board.enqueue(job, tail_later[i], _TAIL_REASON)
            continue
        if job.waiting:
            got = claims.get(i) or _place(board, job, filler, look)
            if got is None:
                continue
            if i not in claims:
                board.admit(i, got)
            for g in got:
                look.resident(g, [job.remaining_s()])
            look.wear(job, got)
            ranks = list(got)
            if not job.ready:  # its trainers start in seconds: its GPUs' time goes to others until then
                look.starting[ranks] = True
                starting[job.job] = (0.0 if any(filler.running(g) for g in ranks) else 1.0,) * len(ranks)
                look.handled(i, ranks, False)
                continue
        else:
            ranks = [board.pos[g] for g in job.gpus]
            if not job.ready:  # starting: its GPUs' time goes to the jobs after it
                look.handled(i, ranks, False)
                continue
        ran = filler.fit(job, ranks) is not None
        if not ran:  # what runs on its GPUs now is more urgent: it waits for those
            held.append((job, ranks, [g for g in ranks if filler.running(g)]))
        look.handled(i, ranks, ran)
    waited_for: set[int] = set()  # GPUs whose runners a more urgent held job waits for
    for job, ranks, blockers in held:
        if filler.lend(job, ranks, waited_for) is None:
            waited_for.update(blockers)
    shares = {name: tuple(max(s, 0.0) for s in v) for name, v in filler.shares().items()}
    for job, ranks, _ in held:
        shares.setdefault(job.job, (0.0,) * len(ranks))
    return board.plan(shares, filler.splits(), outlook(board, look), filler.unpaced(), starting)


def plan_round(jobs: Sequence[FleetJob], gpus: Sequence[Gpu], now: float, levers: Levers,
               interference: Interference | None = None, seed: int = 0) -> RoundPlan:
    """Admission, placement and (paced) shares and splits for one round."""
    levers.validated()
    validate_fleet(jobs, gpus)
    board = Board(jobs, gpus, now, levers, interference or NoInterference(), seed)
    return _paced(board) if levers.shares == "paced" else sliced_round(board)
