"""Paced GPU shares: the model, and how the planner hands shares out.

A paced rank is held for part of every step so that it uses at most its
commanded share s of its GPU's time; the time it leaves goes to the other
ranks there. A real rank realises it by holding for w (1/s - 1) seconds
after each step of w busy seconds. Only borrowers are paced: a job that
lends runs unpaced and takes what its borrowers leave, since two paced
ranks idle their GPU whenever both hold at once (`Filler.unpaced`; the
plan's shares still divide each GPU). The model:
- a job's ranks step together, so its speed is set by its tightest rank:
  x_j = min_r s_r e_r / w_r steps/s, w_r = sec_per_step + sec_per_sample
  b_r its exclusive busy seconds per step at batch b_r;
- ranks running on one GPU interfere only while they overlap: with the
  measured pair efficiency eta (`Interference.efficiency`, <= 1), a rank
  whose neighbours there take a share S of the GPU keeps
  e = 1 - (1 - eta) min(1, 2 S). Two saturating jobs time-sliced (S = 1/2
  each) lose what was measured; a neighbour paced to a sliver costs little;
  a held rank (s = 0) uses no GPU time and costs nothing (it keeps its
  memory: residency is bounded apart, `Levers.max_per_gpu`);
- a GPU's shares sum to at most 1, so every rank gets its share.

The planner (`Filler`) works in two passes:
1. most urgent first, a job runs alone on its GPUs at full speed when no
   more urgent job runs on any of them, else it is held (`fit`);
2. work conservation (`lend`): a held job whose GPUs are partly idle asks
   the job running on each of its busy GPUs for a sliver (at most
   `LEND_MAX` of it) and splits its batch so its ranks there carry few
   samples: the published minibatch redistribution, here around a paced
   neighbour. The borrower first takes the time its lender leaves idle (a
   job whose steps are partly CPU work does not fill its GPU), though not
   for free: a GPU runs one kernel at a time, so a lender that finds the
   borrower's kernel running waits for it (`collision_bound`; a real GPU's
   time slice shortens such waits, so this errs towards not lending). A
   lender gives at most what keeps its predicted slow-down within the
   round's target (one lending only idle time may lose `IDLE_LOSS` of its
   speed past it, and so may one giving the little more, up to its idle
   time again, that a borrower's sliver rank needs to keep pace with the
   borrower's own GPUs: a sliver slower than those sets the whole job's
   pace and idles them), and
   re-splits too, away from the GPU it shares. What a lender offers is
   GPU time; what the borrower's kernels beside it cost it comes on top
   (`overlap_efficiency`), so an offer that would push it past its target
   is tried again smaller (`SLIVER_PARTS`): a borrower with GPUs of its
   own needs only a few samples' time there. The
   loan is made only when the borrower's gain in GPU-equivalents of
   exclusive speed exceeds `LEND_WEIGHT` times what the lenders lose, so
   the more urgent jobs give up little and only for much.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Sequence

import numpy as np

from gpufair.scheduler.policy.fleet import FleetJob, Interference
from gpufair.scheduler.policy.model import even_split
from gpufair.scheduler.policy.rounding import round_split

LEND_MAX = 0.5  # of a lender's GPU; <= 1/2 keeps the borrower's own loss at its pair's
LEND_WEIGHT = 2.0  # a loan must gain this many times what it costs the lenders
#: A lender lending only its idle time may lose this much of its speed to the
#: borrower's kernels (`collision_bound`), past the round's target if need be:
#: a few per cent of one job against a GPU left idle.
IDLE_LOSS = 0.05
#: Where a lender's whole offer is too dear, these parts of it are offered in
#: turn (without the time it leaves idle). With the whole offer only, a 16-GPU ResNet-50
#: held back by 1-GPU jobs on one GPU at a time (each offering half its GPU, at
#: which share the pair's interference would cost it 84 % of its speed) ran 22
#: minutes for 7.6 minutes of work, most of its GPUs idle; offered a quarter, it
#: ran 16 (16 GPUs, p100 w4/5+0 1-GPU; bench/scheduler/HISTORY.md round 37).
SLIVER_PARTS = (0.5, 0.25, 0.1, 0.05)


def overlap_efficiency(pair_eta: float, others_share: float) -> float:
    """Fraction of its speed a rank keeps when its neighbours take `others_share`."""
    return 1.0 - (1.0 - pair_eta) * min(1.0, 2.0 * max(others_share, 0.0))


@dataclass(frozen=True)
class PacedRank:
    """One rank under pacing: its GPU, share and exclusive cost at its batch."""

    gpu: str
    share: float
    sec_per_step: float
    sec_per_sample: float
    batch: int

    def work(self) -> float:
        """Exclusive busy seconds of one step."""
        return self.sec_per_step + self.sec_per_sample * self.batch


@dataclass(frozen=True)
class PacedJob:
    """A resident job under pacing."""

    model: str
    global_batch: int
    ranks: tuple[PacedRank, ...]


def paced_speeds(jobs: Sequence[PacedJob], interference: Interference
                 ) -> tuple[np.ndarray, dict[str, float]]:
    """(samples/s per job, busy fraction per GPU) under the model above."""
    running: dict[str, list[tuple[int, str, float]]] = {}
    for i, job in enumerate(jobs):
        for r in job.ranks:
            if r.share > 0:
                running.setdefault(r.gpu, []).append((i, job.model, r.share))
    rates = np.zeros(len(jobs))
    busy: dict[str, float] = {}
    for i, job in enumerate(jobs):
        if not job.ranks or min(r.share for r in job.ranks) <= 0:
            continue
        steps, used = np.inf, []
        for r in job.ranks:
            others = [(m, s) for k, m, s in running[r.gpu] if k != i]
            eff = 1.0
            if others:
                eta = interference.efficiency(job.model, [m for m, _ in others])
                eff = overlap_efficiency(eta, sum(s for _, s in others))
            steps = min(steps, r.share * eff / r.work())
            used.append((r.gpu, r.work() / eff))
        rates[i] = job.global_batch * steps
        for gpu, per_step in used:
            busy[gpu] = busy.get(gpu, 0.0) + steps * per_step
    return rates, busy


def _joint_split(job: FleetJob, avail: Sequence[float], a: Sequence[float],
                 c: Sequence[float]) -> tuple[int, ...]:
    """Batches that let the ranks finish together with GPU time `avail` each
    (rank r does b_r samples in (a_r + c_r b_r) / avail_r), within [1, cap]."""
    n, total = len(avail), job.global_batch
    cap = float(job.rank_cap if job.rank_cap is not None else total)
    clamped: dict[int, float] = {}
    target: dict[int, float] = {}
    for _ in range(n):
        free = [r for r in range(n) if r not in clamped]
        left = total - sum(clamped.values())
        if not free or left <= 0:
            break
        x = sum(avail[r] / c[r] for r in free) / (left + sum(a[r] / c[r] for r in free))
        target = {r: (avail[r] / x - a[r]) / c[r] for r in free}
        over = [r for r in free if target[r] > cap]
        if not over:
            break
        for r in over:
            clamped[r] = cap
    weights = [clamped.get(r, target.get(r, 1.0)) for r in range(n)]
    split = list(round_split([max(w, 1e-9) for w in weights], total,
                             [job.rank_cap] * n if job.rank_cap is not None else None))
    # Rounding can leave the slowest rank a sample too many (a sliver of a lent
    # GPU carrying 2 samples where 1 lets the job's own GPU run full): move
    # samples off the slowest rank while that speeds the job up.
    def rate(r: int, b: int) -> float:
        return avail[r] / (a[r] + c[r] * b)

    for _ in range(total):
        slow = min(range(n), key=lambda r: rate(r, split[r]))
        if split[slow] <= 1:
            break
        to = max((r for r in range(n) if r != slow and split[r] < cap), key=lambda r: rate(r, split[r] + 1), default=None)
        if to is None or min(rate(slow, split[slow] - 1), rate(to, split[to] + 1)) <= rate(slow, split[slow]):
            break
        split[slow] -= 1
        split[to] += 1
    return tuple(split)


def best_fit(job: FleetJob, avail: Sequence[float], eff: Sequence[float], joint: bool,
             split: tuple[int, ...] | None = None) -> tuple[tuple[int, ...], float]:
    """(split, steps/s) of `job` given GPU time `avail` and efficiency `eff`
    per rank; the joint split when `joint`, else `split` (default even)."""
    a = [job.sec_per_step / e for e in eff]
    c = [job.sec_per_sample / e for e in eff]
    uniform = min(avail) == max(avail) and min(eff) == max(eff)
    if joint and len(avail) > 1 and not uniform:
        split = _joint_split(job, avail, a, c)
    elif joint and len(avail) > 1:  # equal ranks: the even split is the joint optimum
        split = even_split(job.global_batch, job.num_gpus)
    elif split is None:
        split = job.split or even_split(job.global_batch, job.num_gpus)
    steps = min(room / (ai + ci * b) for room, ai, ci, b in zip(avail, a, c, split))
    return split, max(steps, 0.0)


def exclusive_steps(job: FleetJob) -> float:
    """Steps/s alone at the even split (what `exclusive_rate` is in steps)."""
    return job.exclusive_rate / job.global_batch


def _pace_top_up(job: FleetJob, split: Sequence[int], avail: Sequence[float], eff: Sequence[float],
                 lent: Sequence[float | None], idle: Sequence[float]) -> list[float]:
    """Per rank, the GPU time past `avail` that a rank on a lent GPU (`lent`: its
    lender's share there, None on a free GPU) needs to keep pace with the job's
    ranks on free GPUs at `split`: at most `IDLE_LOSS` of that share and the
    lender's `idle` time there (a lender whose steps are partly CPU work finds
    the sliver's kernels in its way only part of the time; one without idle
    time gives only what its slow-down target allows). A rank's fixed cost per
    step (`sec_per_step`) makes even one sample need more than a lender's idle
    time, and the slowest rank sets every rank's pace."""
    a = [job.sec_per_step / e for e in eff]
    c = [job.sec_per_sample / e for e in eff]
    own = [r for r, x in enumerate(lent) if x is None]
    if not own or len(own) == len(lent):
        return [0.0] * len(lent)
    pace = min(exclusive_steps(job), *(avail[r] / (a[r] + c[r] * split[r]) for r in own))
    return [0.0 if x is None else min(max(pace * (a[r] + c[r] * split[r]) - avail[r], 0.0), IDLE_LOSS * x, idle[r])
            for r, x in enumerate(lent)]


def collision_bound(job: FleetJob, busy_s: float) -> float:
    """Steps/s of `job` at most when, otherwise at its exclusive speed, each
    step may find a borrower's kernel running on its GPU and wait for it:
    `busy_s` is the chance of that (the borrower's share of the job's idle
    time) times the kernel's length; a kernel found running has half its
    length left on average."""
    return 1.0 / (1.0 / exclusive_steps(job) + 0.5 * busy_s)


@dataclass
class _Fit:
    """A job given time this round."""

    job: FleetJob
    gpus: list[int]
    split: tuple[int, ...]
    steps: float
    eff: list[float]
    lender: bool = True  # ran alone in pass 1 and lent nothing yet: may lend slivers
    natural: bool = False  # at its exclusive speed: unpaced (its commanded shares are 1)
    lent: bool = False  # gave a borrower time (`Filler.unpaced`)

    def shares(self) -> list[float]:
        """The GPU time it uses, per rank."""
        return [self.steps * (self.job.sec_per_step + self.job.sec_per_sample * b) / e
                for b, e in zip(self.split, self.eff)]

    def commanded(self) -> list[float]:
        """What its ranks are told: a job at its exclusive speed is not paced."""
        return [1.0] * len(self.gpus) if self.natural else self.shares()


def _capped(job: FleetJob, steps: float) -> tuple[float, bool]:
    """(`steps` at most `job`'s exclusive speed, whether the cap applied): alone a job
    runs no faster than its exclusive speed; where its steps are partly CPU work
    (measured GPU-busy costs) its GPUs keep idle time that others may use."""
    top = exclusive_steps(job)
    return (top, True) if steps >= top else (steps, False)


class Filler:
    """Hands out GPU time (module docstring). GPUs are positions in the
    per-GPU arrays; `left[g]` is the time not yet given out on GPU g."""

    def __init__(self, num_gpus: int, interference: Interference, min_share: float,
                 joint: bool, now: float = 0.0, sd_cap: float = float("inf")) -> None:
        self.left = np.ones(num_gpus)
        self._interference, self._min, self._joint = interference, min_share, joint
        self._now, self._sd_cap = now, sd_cap
        self._fits: dict[str, _Fit] = {}
        self._on: dict[int, list[str]] = {}  # gpu -> jobs running there

    def running(self, gpu: int) -> list[str]:
        """The jobs given time on `gpu` so far this round."""
        return list(self._on.get(gpu, ()))

    def shares(self) -> dict[str, tuple[float, ...]]:
        """Every job given time -> its per-rank shares."""
        return {name: tuple(fit.commanded()) for name, fit in self._fits.items()}

    def unpaced(self) -> frozenset[str]:
        """The jobs that lent time and yet run unpaced: each takes what its paced
        borrowers leave of its GPUs, so a borrower that does not use its share
        (between its steps) leaves no GPU idle. The planned shares still bound
        the borrowers, and so what the lender loses."""
        return frozenset(name for name, fit in self._fits.items() if fit.lent and not fit.natural)

    def splits(self) -> dict[str, tuple[int, ...]]:
        """Every job given time -> its split."""
        return {name: fit.split for name, fit in self._fits.items()}

    def _commit(self, fit: _Fit) -> None:
        old = self._fits.get(fit.job.job)
        self._fits[fit.job.job] = fit
        if old is None:
            for g in fit.gpus:
                self._on.setdefault(g, []).append(fit.job.job)
        for g in fit.gpus:
            used = 0.0
            for name in self._on[g]:
                other = self._fits[name]
                used += other.shares()[other.gpus.index(g)]
            self.left[g] = 1.0 - used

    def _slowdown(self, job: FleetJob, steps: float) -> float:
        """Predicted SD of `job` if it kept `steps` steps/s to the end."""
        if steps <= 0:
            return float("inf")
        late = job.remaining_s() * exclusive_steps(job) / steps
        return (self._now - job.arrival_s + late) / job.alone_s()

    def _keeps(self, fit: _Fit) -> float:
        """The fraction of its speed `fit` must keep for its predicted slow-down to
        stay within the round's target (1: it can lend nothing)."""
        job = fit.job
        late = self._sd_cap * job.alone_s() - (self._now - job.arrival_s)
        if late <= 0 or fit.steps <= 0:
            return 1.0
        return min(job.remaining_s() * exclusive_steps(job) / late / fit.steps * (1 + 1e-6), 1.0)

    def fit(self, job: FleetJob, gpus: Sequence[int]) -> tuple[int, ...] | None:
        """Pass 1: run `job` alone on `gpus` (its ranks in order) if nothing
        runs on any of them; its split, else None (held)."""
        if any(self._on.get(g) for g in gpus):
            return None
        avail = [float(self.left[g]) for g in gpus]
        if min(avail) < self._min:
            return None
        split, steps = best_fit(job, avail, [1.0] * len(gpus), self._joint)
        if steps <= 0:
            return None
        steps, natural = _capped(job, steps)
        self._commit(_Fit(job, list(gpus), split, steps, [1.0] * len(gpus), natural=natural))
        return split

    def lend(self, job: FleetJob, gpus: Sequence[int], waited_for: Collection[int] = ()
             ) -> tuple[int, ...] | None:
        """Pass 2: run a held `job` on slivers of its busy GPUs (module docstring);
        no job running on a GPU of `waited_for` lends."""
        idle, extra, eff, lenders = [], [], [], []  # per GPU: what it can offer
        for g in gpus:
            there = self._on.get(g, [])
            if not there:  # a free GPU: all its time left
                idle.append(0.0)
                extra.append(float(self.left[g]))
                eff.append(1.0)
                lenders.append(None)
                continue
            if len(there) > 1 or not self._fits[there[0]].lender:
                return None
            lender = self._fits[there[0]]
            if any(x in waited_for for x in lender.gpus):
                return None
            share = lender.shares()[lender.gpus.index(g)]
            # The time its lender leaves idle (between its steps' GPU work), and a sliver.
            idle.append(float(self.left[g]) if self.left[g] > 1e-9 else 0.0)
            extra.append(min(LEND_MAX, share * (1.0 - self._keeps(lender))))
            eff.append(self._interference.efficiency(job.model, [lender.job.model]))
            lenders.append(lender)
        if all(x is None for x in lenders):
            return None
        # Idle time costs a lender its waits for the borrower's kernels: where all
        # of it would cost too much, less of it (fewer samples there) may not.
        for scale in (1.0, 0.5, 0.25, 0.0) if any(idle) else (1.0,):
            split = self._loan(job, gpus, idle, [i * scale + x for i, x in zip(idle, extra)],
                               eff, lenders)
            if split is not None:
                return split
        # An offer counts GPU time, not the interference the borrower adds: try it smaller.
        for part in SLIVER_PARTS:
            split = self._loan(job, gpus, idle, [x if lender is None else x * part
                                                 for x, lender in zip(extra, lenders)],
                               eff, lenders)
            if split is not None:
                return split
        return None

    def _loan(self, job: FleetJob, gpus: Sequence[int], idle: Sequence[float],
              avail: Sequence[float], eff: Sequence[float], lenders: Sequence[_Fit | None]
              ) -> tuple[int, ...] | None:
        """`lend` offering `avail` per GPU; `idle`: the lenders' idle time there."""
        # `min_share` bounds the GPU time a job runs on, not each rank's: a job with a
        # GPU of its own keeps a sample or two on a sliver of a lent one (a lender
        # whose steps leave 3 % idle, say) rather than be held with its own GPU idle.
        if min(avail) <= 0 or max(avail) < self._min:
            return None
        fit = best_fit(job, avail, eff, self._joint)
        top = _pace_top_up(job, fit[0], avail, eff, [x.shares()[x.gpus.index(g)] if x is not None else None
                                                     for g, x in zip(gpus, lenders)], idle)
        if any(top):
            # The sliver paces the whole job, so its own GPUs idle at that pace: a lender
            # gives the little more that keeps pace as it gives idle time (IDLE_LOSS).
            more = [x + t for x, t in zip(avail, top)]
            got = self._try_loan(job, gpus, [i + t for i, t in zip(idle, top)], more, eff, lenders,
                                 best_fit(job, more, eff, self._joint))
            if got is not None:
                return got
        return self._try_loan(job, gpus, idle, avail, eff, lenders, fit)

    def _try_loan(self, job: FleetJob, gpus: Sequence[int], idle: Sequence[float],
                  avail: Sequence[float], eff: Sequence[float], lenders: Sequence[_Fit | None],
                  fit: tuple[tuple[int, ...], float]) -> tuple[int, ...] | None:
        """`_loan` at exactly `avail` (`fit`: the job's best split and speed there);
        `idle`: what a lender may give as if idle."""
        split, steps = fit
        mine = _Fit(job, list(gpus), split, min(steps, exclusive_steps(job)), eff, lender=False)
        if steps <= 0:
            return None
        taken = {g: s for g, s, x in zip(gpus, mine.shares(), lenders) if x is not None}
        # Per lent GPU, its share of the lender's idle time times its kernel (busy
        # seconds a step); a measured pair's efficiency applies to the whole share.
        collide = {g: min(s, i) * s / mine.steps
                   for g, s, i, x in zip(gpus, mine.shares(), idle, lenders) if x is not None}
        loss, refits = 0.0, []
        for lender in {id(x): x for x in lenders if x is not None}.values():
            l_avail, l_eff = [], []
            for g in lender.gpus:
                if g in taken:
                    l_avail.append(1.0 - taken[g])
                    pair = self._interference.efficiency(lender.job.model, [job.model])
                    l_eff.append(overlap_efficiency(pair, taken[g]))
                else:
                    l_avail.append(float(self.left[g]) + lender.shares()[lender.gpus.index(g)])
                    l_eff.append(1.0)
            l_split, l_steps = best_fit(lender.job, l_avail, l_eff, self._joint, lender.split)
            l_steps, natural = _capped(lender.job, l_steps)
            if natural:  # it lent only idle time: its split stays if that keeps its speed
                _, kept = best_fit(lender.job, l_avail, l_eff, False, lender.split)
                l_split = lender.split if kept >= l_steps else l_split
            l_steps = min(l_steps, collision_bound(
                lender.job, max(collide[g] for g in lender.gpus if g in collide)))
            cap = self._sd_cap
            if all(taken[g] <= idle[gpus.index(g)] + 1e-9 for g in lender.gpus if g in taken):
                # Only its idle time: it may lose a little to keep that time busy.
                cap = max(cap, self._slowdown(lender.job, lender.steps * (1 - IDLE_LOSS)))
            if self._slowdown(lender.job, l_steps) > cap:
                return None
            loss += lender.job.num_gpus * (lender.steps - l_steps) / exclusive_steps(lender.job)
            # A job lends once a round: its efficiencies now count this borrower.
            refits.append(_Fit(lender.job, lender.gpus, l_split, l_steps, l_eff, lender=False,
                               natural=natural, lent=True))
        gain = job.num_gpus * mine.steps / exclusive_steps(job)
        if gain <= LEND_WEIGHT * max(loss, 0.0):
            return None
        for refit in refits:
            self._commit(refit)
        self._commit(mine)
        return split
