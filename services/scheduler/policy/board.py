"""The state one scheduling round works on: who sits on which GPU, which
GPUs a job may join, the reservation, and the queue entries written so far."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from gpufair.scheduler.policy.fleet import (FleetJob, Gpu, Interference, Levers, NoInterference,
                                            Placed, QueueEntry, RoundPlan)
from gpufair.scheduler.policy.placement import block_labels
from gpufair.scheduler.policy.priority import priority_order, wider_than_half

#: The `sd` queue reserves GPUs for the most urgent job that cannot start
#: only once its slack to its slow-down deadline (or to the makespan goal,
#: when that comes first: a long job must start in time for it) falls to
#: this fraction of its exclusive time. Reserving for every blocked head job
#: (plain EASY) idled reserved GPUs for 4-13 % of the time on the shared mixes while
#: preemption by pacing already keeps large jobs from starving; at 0.5 the
#: empty reserved GPUs were still the largest idle part in the worst cells
#: (0.25-0.5 measured, bench/scheduler/HISTORY.md round 9). One exception,
#: where pacing cannot help: `Board.starving`.
RESERVE_LAXITY = 0.35
_WHOLE = 0.99  # a share this large is the whole GPU (shares are rounded for the trainers)


def available_at(free_at: np.ndarray, empty_at: np.ndarray, compat: np.ndarray,
                 allowed: np.ndarray) -> np.ndarray:
    """Per GPU, seconds until it could take a job: `free_at` where the job may
    share with the jobs there, `empty_at` where it may not (once they have
    left), never (inf) where it may not be placed."""
    return np.where(allowed, np.where(compat, free_at, empty_at), np.inf)


def earliest_start(avail: np.ndarray, need: int) -> float:
    """Seconds until `need` GPUs could take the job (`available_at`)."""
    return float(np.sort(avail)[need - 1]) if need <= len(avail) else float("inf")


def drain_idle(empty_at: np.ndarray, need: int) -> float:
    """GPU-seconds the `need` GPUs that empty first (`empty_at`, seconds from
    now) idle until the last of them does."""
    first = np.sort(empty_at)[:need]
    return float(np.sum(first[-1] - first))


class Board:
    """Per-GPU state of one round, GPUs by position in the round's list."""

    def __init__(self, jobs: Sequence[FleetJob], gpus: Sequence[Gpu], now: float,
                 levers: Levers, interference: Interference, seed: int) -> None:
        self.jobs, self.gpus, self.now, self.levers = jobs, gpus, now, levers
        self.interference = interference
        self.rng = np.random.default_rng(seed)
        self.pos = {g.name: i for i, g in enumerate(gpus)}
        self.order, self.target, self.goal, self.wide_cap = priority_order(
            jobs, now, levers.queue, len(gpus))
        self.rank = {jobs[i].job: r for r, i in enumerate(self.order)}
        self.node_names = sorted({g.node for g in gpus})
        node_id = {name: i for i, name in enumerate(self.node_names)}
        self.node = (np.array([node_id[g.node] for g in gpus])
                     if len(self.node_names) > 1 else None)
        self.residents: list[list[int]] = [[] for _ in gpus]  # job indices
        self.models: list[set[str]] = [set() for _ in gpus]
        self.widest = np.zeros(len(gpus), dtype=int)  # GPUs of the widest job resident there
        for i, j in enumerate(jobs):
            for g in j.gpus:
                self.residents[self.pos[g]].append(i)
                self.models[self.pos[g]].add(j.model)
                self.widest[self.pos[g]] = max(self.widest[self.pos[g]], j.num_gpus)
        self.count = np.array([len(r) for r in self.residents], dtype=int)
        # The largest of the least slow-downs the jobs resident at the round's
        # start can still end with (`FleetJob.sd_alone_from`), at least 1.
        self.resident_sd = max([1.0, *(j.sd_alone_from(now) for j in jobs if not j.waiting)])
        self.admitted: dict[str, tuple[str, ...]] = {}
        self.queue: list[QueueEntry] = []
        self.reserved = np.zeros(len(gpus), dtype=bool)
        self.reserved_for: str | None = None
        self.release_s = 0.0  # seconds from now until the reservation can start
        self.blocked_by: QueueEntry | None = None  # `fifo-strict`: the first job that waits
        self._compat: dict[str, np.ndarray] = {}
        self.lifted: dict[str, FleetJob] = {}  # resident -> the job whose place it took (`inherit`)
        self._blocks: np.ndarray | None = None  # `blocks`, until an admission changes them

    def at_risk(self, job: FleetJob) -> bool:
        """Is waiting `job` close enough to its deadline to hold a reservation?"""
        due = min(job.arrival_s + self.target * job.alone_s(), self.goal)
        return due - self.now - job.remaining_s() <= RESERVE_LAXITY * job.alone_s()

    def starving(self, job: FleetJob) -> bool:
        """Would waiting `job`, the most urgent, starve unless it reserves GPUs
        before it is at risk? Where it is wider than half the cluster, only
        empty GPUs can take it (it may share too few), it has waited its time
        alone, and started now it would end at the largest slow-down of the
        jobs waiting. Pacing cannot hold back a job it may not share with, so
        narrower jobs take each GPU as it empties, while the round's target,
        rising as it waits (the fluid cluster knows no gangs or sharing
        limits), keeps its deadline ahead of it: 12-GPU jobs waited 7 hours
        on a redrawn k80. Not for narrower jobs (reservations one after
        another left GPUs empty while jobs waited), nor where another waiting
        job would end slower (that one then sets the largest slow-down). It
        only reserves: lifting the residents it waits on ahead, as `inherit`
        does, slowed mean completion (bench/scheduler/HISTORY.md round 42)."""
        return (wider_than_half(job.num_gpus, len(self.gpus))
                and self.now - job.arrival_s >= job.alone_s()
                and int((self.compatible(job.model) & self.allowed(job)).sum()) < job.num_gpus
                and job.sd_alone_from(self.now) >= max(j.sd_alone_from(self.now)
                                                       for j in self.jobs if j.waiting))

    def inherit(self) -> None:
        """Priority inheritance. If the first waiting job at risk (the one a
        reservation goes to) cannot share enough GPUs with the jobs on them,
        it waits for GPUs to empty: the residents of those that can empty
        first, where less urgent, move to its place in the order, just ahead
        of it. Else pacing holds them back for jobs less urgent than the one
        they block, and the GPUs it waits for do not empty."""
        if self.levers.queue != "sd" or self.levers.shares != "paced":
            return
        for at, i in enumerate(self.order):
            job = self.jobs[i]
            if job.waiting and self.at_risk(job):
                break
        else:
            return
        allowed, compat = self.allowed(job), self.compatible(job.model)
        short = job.num_gpus - int((compat & allowed).sum())
        must = np.flatnonzero(allowed & ~compat)
        if short <= 0 or len(must) < short:
            return
        work = [sum(self.jobs[k].remaining_s() for k in self.residents[g]) for g in must]
        blockers = {k for g in must[np.argsort(work, kind="stable")[:short]]
                    for k in self.residents[g]}
        lift = [k for k in self.order[at + 1:] if k in blockers]
        if lift:
            self.order = [*self.order[:at], *lift,
                          *(k for k in self.order[at:] if k not in blockers)]
            self.rank = {self.jobs[k].job: r for r, k in enumerate(self.order)}
            self.lifted = {self.jobs[k].job: job for k in lift}

    def blocks(self) -> np.ndarray:
        """Per GPU, its block's label (`placement.block_labels`) by the jobs
        resident now, those admitted this round included."""
        if self._blocks is None:
            members = [[self.pos[g] for g in (j.gpus or self.admitted.get(j.job, ()))]
                       for j in self.jobs]
            self._blocks = block_labels([m for m in members if m], len(self.gpus))
        return self._blocks

    def compatible(self, model: str) -> np.ndarray:
        """Per GPU: True when `model` may share it with every job there."""
        if isinstance(self.interference, NoInterference):
            return np.ones(len(self.gpus), dtype=bool)
        ok = self._compat.get(model)
        if ok is None:
            verdict: dict[str, bool] = {}
            ok = np.array([all(verdict.setdefault(m, self.interference.compatible(model, m))
                               for m in there) for there in self.models], dtype=bool)
            self._compat[model] = ok
        return ok

    def room(self, job: FleetJob) -> np.ndarray:
        """Per GPU: room for one more job, compatible with every job there, and
        one the job may be placed on."""
        return (self.count < self.levers.max_per_gpu) & self.compatible(job.model) \
            & self.allowed(job)

    def allowed(self, job: FleetJob) -> np.ndarray:
        """Per GPU: may `job` be placed there at all (`FleetJob.gpus_allowed`)?"""
        if not job.gpus_allowed:
            return np.ones(len(self.gpus), dtype=bool)
        return np.array([g.name in job.gpus_allowed for g in self.gpus], dtype=bool)

    def backfill(self, seconds: float) -> np.ndarray:
        """Per GPU: may a job needing `seconds` more go there without delaying
        the reservation (EASY: off reserved GPUs, or done before it starts)?"""
        if self.reserved_for is None or seconds <= self.release_s:
            return np.ones(len(self.gpus), dtype=bool)
        return ~self.reserved

    def cached(self, job: FleetJob) -> np.ndarray | None:
        """Per GPU: in a node whose cache holds the job's dataset (None: unknown)."""
        if not job.cached_nodes or self.node is None:
            return None
        ids = [i for i, n in enumerate(self.node_names) if n in job.cached_nodes]
        return np.isin(self.node, ids)

    def admit(self, index: int, gpus: Sequence[int]) -> None:
        """Place waiting job `index` on GPU positions `gpus`."""
        job = self.jobs[index]
        self.admitted[job.job] = tuple(self.gpus[g].name for g in gpus)
        for g in gpus:
            self.count[g] += 1
            self.residents[g].append(index)
            self.models[g].add(job.model)
            self.widest[g] = max(self.widest[g], job.num_gpus)
        self._compat.clear()
        self._blocks = None

    def enqueue(self, job: FleetJob, start_s: float, reason: str) -> None:
        """`job` stays queued this round (under `fifo-strict` the first one
        queued blocks every later job)."""
        self.queue.append(QueueEntry(job.job, len(self.queue) + 1,
                                     max(self.now - job.arrival_s, 0.0), max(start_s, 0.0),
                                     reason))
        if self.levers.queue == "fifo-strict" and self.blocked_by is None:
            self.blocked_by = self.queue[-1]

    def reserve(self, job: FleetJob, free_at: np.ndarray) -> None:
        """Hold the GPUs that free up first (`free_at`, seconds from now until
        each could take it; inf: never) for `job`, the most urgent that cannot
        start, once it is at risk; or once it is `starving`, where waiting for
        them idles no more than its own GPU time, as covering asks
        (`arrival.drains`): else a 16-GPU job of 3 minutes reserved a whole
        redrawn k80 cluster for an hour."""
        if self.levers.queue != "sd" or self.reserved_for is not None:
            return
        risk = self.at_risk(job)
        if not (risk or (len(self.queue) == 1 and self.starving(job))):
            return
        ok = np.flatnonzero(np.isfinite(free_at))
        if len(ok) < job.num_gpus:
            return
        pick = ok[np.argsort(free_at[ok], kind="stable")[:job.num_gpus]]
        if not risk and drain_idle(free_at[pick], job.num_gpus) > job.num_gpus * job.remaining_s():
            return
        self.reserved[pick] = True
        self.reserved_for = job.job
        self.release_s = float(free_at[pick].max())

    def behind(self, job: FleetJob) -> bool:
        """Under `fifo-strict`, queue `job` behind the first job that waits
        (nothing passes it) and say so; False when `job` may be placed."""
        first = self.blocked_by
        if first is None:
            return False
        self.enqueue(job, first.predicted_start_s,
                     f"behind {first.job}: strict FIFO lets no job pass an earlier one")
        return True

    def wait(self, job: FleetJob, free_at: np.ndarray, reason: str,
             empty_at: np.ndarray) -> None:
        """Queue `job` with an estimated start and why it cannot start now,
        and reserve for it if it is the first at risk. `free_at`: seconds
        from now until each GPU could take it; `empty_at`: until each GPU
        empties, when a GPU whose jobs `job` cannot share with could take
        it; `reason`: the caller's, used when room and the reservation would
        allow the job. A job that can share with nobody around still gets a
        reservation: without one, a stream of jobs it cannot share with
        keeps enough GPUs occupied and it starves (a v100 trace: SD 21,
        bench/scheduler/HISTORY.md round 20)."""
        n, cap = job.num_gpus, self.levers.max_per_gpu
        allowed = self.allowed(job)
        compat = self.compatible(job.model) & allowed
        avail = available_at(free_at, empty_at, compat, allowed)
        start = earliest_start(avail, n)
        room = self.room(job)
        if compat.sum() < n:
            reason = (f"no room: it cannot share a GPU with the jobs on "
                      f"{int(allowed.sum() - compat.sum())} of the {int(allowed.sum())} "
                      f"GPUs it may use and needs {n}")
        elif room.sum() < n:
            full = int(((self.count >= cap) & compat).sum())
            reason = f"no room: {full} of the GPUs it may share hold {cap} jobs"
        elif (room & self.backfill(job.remaining_s())).sum() < n:
            reason = f"GPUs reserved for {self.reserved_for}"
            start = max(start, self.release_s)
        self.enqueue(job, start, reason)
        self.reserve(job, avail)

    def placed(self, shares: dict | None, unpaced: frozenset[str] = frozenset()) -> dict[str, Placed]:
        """Why each admitted job went where it did: its share of its GPUs
        (paced: the planned one; time-sliced: one over its most shared GPU's
        residents), its neighbours, its SD if it kept that speed. A job in
        `unpaced` lends a sliver and yet runs unpaced: it is ahead of its neighbours."""
        index = {j.job: i for i, j in enumerate(self.jobs)}
        out = {}
        for name, gpus in self.admitted.items():
            i = index[name]
            job, pos = self.jobs[i], [self.pos[g] for g in gpus]
            near = tuple(sorted({self.jobs[k].job for g in pos for k in self.residents[g] if k != i}))
            if shares is not None:
                share = min(shares.get(name, (0.0,)))
                how = ("alone" if not near else "ahead of its neighbours") if share >= _WHOLE or name in unpaced \
                    else f"paced to {share:.0%}" if share > 0 else "held until its turn"
            else:
                ways = int(max(self.count[g] for g in pos))
                share, how = 1.0 / ways, "alone" if ways == 1 else f"time-sliced {ways} ways"
            wait = max(self.now - job.arrival_s, 0.0)
            sd = (wait + job.remaining_s() / share) / job.alone_s() if share > 0 else float("inf")
            out[name] = Placed(sd, near, how)
        return out

    def plan(self, shares: dict | None = None, splits: dict | None = None,
             outlook: object | None = None, unpaced: frozenset[str] = frozenset(),
             starting: dict | None = None) -> RoundPlan:
        """The round's outcome (`shares` None: time-sliced); `starting`: the shares
        jobs placed but not yet stepping will get, for why they went where they did."""
        notes = None if shares is None else {**(starting or {}), **shares}
        return RoundPlan(self.admitted, shares or {}, splits or {}, tuple(self.queue),
                         self.rank, self.target, outlook, self.placed(notes, unpaced), unpaced)
