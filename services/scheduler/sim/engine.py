"""Discrete-event simulation of a shared GPU cluster under gpufair's levers.

Every job is waiting (arrived, not placed) or resident on GPUs it keeps to
the end. Between events every resident runs at the steady-state speed of
the shares model in force, so progress is integrated exactly:
- `time-slicing`: every resident runs; GPUs divide their time by the
  time-slicing model (`policy/model.py`), each rank's cost divided by its
  measured interference next to every other job there;
- `paced`: each rank runs at the share of its GPU the round planner gave
  it (`policy/paced.py`), 0 holding it; interference only among ranks that
  run.
Events are arrivals, completions and policy periods. At every event the
round planner (`policy.plan_round`: queue order, admission, placement and,
when paced, shares and joint splits) sees every job; under time-slicing the
split policy (`policy.decide`) re-splits every `period_s`, as the service
loop does. Paced rounds also run every `period_s`, since queue order moves
with time.

Costs come from the co-location file (`sim/colocation.py`): a job on N
GPUs runs each rank at the model's N-GPU cost (measured N-GPU speed where
the file has it), so a job alone on its GPUs has SD 1. A job's slow-down
counts its queue wait (`sd`, end to end); `run_sd` counts only the time
since it was placed.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from gpufair.common.errors import InvalidArgument
from gpufair.scheduler.policy import (ClusterState, Decision, JobState, PolicyConfig, RankState,
                                      WarmStart, decide, even_split, get_policy, shared_rates)
from gpufair.scheduler.policy.admission import plan_round
from gpufair.scheduler.policy.fleet import FleetJob, Gpu, Levers, RoundPlan
from gpufair.scheduler.policy.paced import PacedJob, PacedRank, paced_speeds
from gpufair.scheduler.policy.placement import DEFAULT_PLACEMENT
from gpufair.scheduler.sim.colocation import Colocation, RankCost
from gpufair.scheduler.sim.result import IDLE_KINDS, JobResult, SimResult
from gpufair.scheduler.sim.workload import TraceJob


@dataclass(frozen=True)
class SimConfig:
    """Cluster size, the levers and the simulator's knobs (documented defaults:
    FIFO, least-loaded, time-slicing, i.e. the Kubernetes default)."""

    num_gpus: int
    policy: str
    period_s: float = 60.0
    max_per_gpu: int = 4
    seed: int = 0
    noise: float = 0.0  # relative std-dev of the costs the split policy "measures"
    placement: str = DEFAULT_PLACEMENT
    policy_config: PolicyConfig = field(default_factory=PolicyConfig)
    queue: str = "fifo"
    shares: str = "time-slicing"

    def levers(self) -> Levers:
        """The round planner's levers."""
        return Levers(self.queue, self.placement, self.shares, self.policy, self.max_per_gpu)


@dataclass
class _Job:
    trace: TraceJob
    cost: RankCost  # per rank at the job's GPU count
    cap: int
    exclusive_rate: float
    gpus: tuple[int, ...] = ()
    split: tuple[int, ...] = ()
    shares: tuple[float, ...] = ()
    done: float = 0.0
    attained: float = 0.0  # GPU-seconds at exclusive speed
    started_s: float = 0.0
    crowd_at_arrival: float = 0.0  # integral of jobs present, at arrival (for rho)


def exclusive_rate_of(cost: RankCost, job: TraceJob) -> float:
    """Speed with its GPUs to itself and the even split (the SD denominator)."""
    worst = max(even_split(job.global_batch, job.num_gpus))
    return job.global_batch / cost.step_time(worst)


Observer = Callable[[ClusterState, dict[str, Decision]], None]


class Simulator:
    """One run of one configuration over one trace; call `run()` once.

    `on_decision`, if given, sees every snapshot the split policy decided on
    and its decisions (benchmarks use it to score decisions)."""

    def __init__(self, colocation: Colocation, trace: tuple[TraceJob, ...], config: SimConfig,
                 on_decision: Observer | None = None) -> None:
        if config.num_gpus < 1 or config.max_per_gpu < 1 or config.period_s <= 0:
            raise InvalidArgument("num_gpus, max_per_gpu and period_s must be positive")
        if not trace:
            raise InvalidArgument("the trace has no jobs")
        get_policy(config.policy)  # unknown names fail before any work
        config.levers().validated()
        for job in trace:
            if job.model not in colocation.costs:
                raise InvalidArgument(f"line {job.line}: job {job.job!r}: model {job.model!r} "
                                      f"is not measured on GPU type {colocation.gpu_type!r}")
            if job.num_gpus > config.num_gpus:
                raise InvalidArgument(f"line {job.line}: job {job.job!r} needs {job.num_gpus} "
                                      f"GPUs, the cluster has {config.num_gpus}")
        self._colo, self._cfg, self._observer = colocation, config, on_decision
        self._levers = config.levers()
        self._trace = sorted(trace, key=lambda j: (j.arrival_s, j.line))
        self._gpus = tuple(Gpu(f"gpu-{g}") for g in range(config.num_gpus))
        self._noise_rng = np.random.default_rng((config.seed, 1))
        self._rounds = 0
        self._occ: list[list[str]] = [[] for _ in range(config.num_gpus)]
        self._jobs: dict[str, _Job] = {}  # alive: waiting or resident
        self._warm = WarmStart()  # each split decision starts from the last one's LP bases

    # --- the round planner ---------------------------------------------------------------

    def _fleet(self) -> list[FleetJob]:
        out = []
        for name, j in self._jobs.items():
            t = j.trace
            out.append(FleetJob(name, t.num_gpus, t.global_batch, t.arrival_s, t.total_samples,
                                j.exclusive_rate, j.cost.sec_per_sample, j.cost.sec_per_step,
                                min(j.done, t.total_samples), t.model, j.cap,
                                tuple(self._gpus[g].name for g in j.gpus), j.split,
                                None, j.attained))
        return out

    def _plan(self, now: float) -> float:
        started = time.perf_counter()
        plan = plan_round(self._fleet(), self._gpus, now, self._levers, self._colo,
                          seed=hash((self._cfg.seed, self._rounds)) & 0xFFFFFFFF)
        self._rounds += 1
        self._apply(plan, now)
        return time.perf_counter() - started

    def _apply(self, plan: RoundPlan, now: float) -> None:
        for name, gpus in plan.admitted.items():
            j = self._jobs[name]
            j.gpus = tuple(int(g.split("-")[1]) for g in gpus)
            j.split = even_split(j.trace.global_batch, j.trace.num_gpus)
            j.started_s = now
            for g in j.gpus:
                self._occ[g].append(name)
        if self._levers.shares == "paced":
            for name, j in self._jobs.items():
                if j.gpus:
                    j.shares = plan.shares.get(name, (0.0,) * len(j.gpus))
                    j.split = plan.splits.get(name, j.split)

    # --- speeds ---------------------------------------------------------------------------

    def _states(self, now: float, noisy: bool) -> list[JobState]:
        out = []
        for name, run in self._jobs.items():
            if not run.gpus:
                continue
            ranks = []
            for g, b in zip(run.gpus, run.split):
                neighbours = [self._jobs[k].trace.model for k in self._occ[g] if k != name]
                eta = self._colo.efficiency(run.trace.model, neighbours)
                err = (math.exp(self._noise_rng.normal(0.0, self._cfg.noise))
                       if noisy and self._cfg.noise else 1.0)
                ranks.append(RankState(f"gpu-{g}", b, run.cost.sec_per_sample / eta * err,
                                       run.cost.sec_per_step / eta * err, run.cap))
            out.append(JobState(name, run.trace.global_batch, tuple(ranks), run.done,
                                run.trace.total_samples, now - run.trace.arrival_s,
                                None, run.exclusive_rate))
        return out

    def _speeds(self, now: float) -> tuple[dict[str, float], dict[str, float]]:
        """Samples/s of every resident job, and each busy GPU's busy fraction."""
        if self._levers.shares == "time-slicing":
            states = self._states(now, noisy=False)
            shared = shared_rates(states)
            return dict(zip((s.job for s in states), shared.rates)), shared.gpu_busy
        names, paced = [], []
        for name, j in self._jobs.items():
            if j.gpus:
                names.append(name)
                paced.append(PacedJob(j.trace.model, j.trace.global_batch, tuple(
                    PacedRank(f"gpu-{g}", s, j.cost.sec_per_step, j.cost.sec_per_sample, b)
                    for g, s, b in zip(j.gpus, j.shares, j.split))))
        rates, busy = paced_speeds(paced, self._colo)
        return dict(zip(names, rates)), busy

    def _idle(self, busy: dict[str, float]) -> np.ndarray:
        """Each GPU's idle fraction, summed by why it idles (`IDLE_KINDS`)."""
        out = dict.fromkeys(IDLE_KINDS, 0.0)
        waiting = any(not j.gpus for j in self._jobs.values())
        for g, there in enumerate(self._occ):
            used = min(busy.get(f"gpu-{g}", 0.0), 1.0)
            if not there:
                out["waiting" if waiting else "no_work"] += 1.0
            elif used <= 1e-9:
                out["held"] += 1.0
            else:
                out["partial"] += 1.0 - used
        return np.array([out[kind] for kind in IDLE_KINDS])

    def _resplit(self, now: float) -> float:
        """The split policy's period under time-slicing."""
        started = time.perf_counter()
        cluster = ClusterState(tuple(self._states(now, noisy=True)))
        if not cluster.jobs:
            return 0.0
        decisions = decide(cluster, self._cfg.policy, self._cfg.policy_config, self._warm)
        spent = time.perf_counter() - started
        if self._observer is not None:
            self._observer(cluster, decisions)
        for name, d in decisions.items():
            if d.changed:
                self._jobs[name].split = d.split
        return spent

    # --- the event loop -------------------------------------------------------------------

    def run(self) -> SimResult:
        """Simulate until every job has finished."""
        cfg = self._cfg
        pending = list(self._trace)
        start = now = pending[0].arrival_s
        next_tick = now + cfg.period_s
        finished: list[JobResult] = []
        util_trace: list[tuple[float, float]] = []
        busy_integral = crowd = decision_s = round_s = 0.0
        idle_integral = np.zeros(len(IDLE_KINDS))
        decisions = rounds = 0
        multi_s = uneven_s = 0.0
        paced = self._levers.shares == "paced"
        ticks_matter = paced or cfg.policy != "even"
        while pending or self._jobs:
            if not self._jobs:
                now = max(now, pending[0].arrival_s)
            rates, per_gpu = self._speeds(now)
            busy = sum(per_gpu.values())
            horizon = [pending[0].arrival_s] if pending else []
            if self._jobs and ticks_matter and self._contended():
                horizon.append(next_tick)
            horizon += [now + (self._jobs[n].trace.total_samples - self._jobs[n].done) / r
                        for n, r in rates.items() if r > 0]
            if not horizon:  # nothing can run and nothing arrives: a planner bug
                raise RuntimeError("simulation stalled: jobs wait but none can be placed")
            t_next = max(min(horizon), now)
            dt = t_next - now
            util_trace.append((now, busy / cfg.num_gpus))
            busy_integral += busy * dt
            idle_integral += self._idle(per_gpu) * dt
            crowd += len(self._jobs) * dt
            d_multi, d_uneven = self._unevenness(dt)
            multi_s, uneven_s = multi_s + d_multi, uneven_s + d_uneven
            for n, r in rates.items():
                j = self._jobs[n]
                j.done += r * dt
                j.attained += j.trace.num_gpus * dt * r / j.exclusive_rate
            now = t_next
            changed = False
            for n in [n for n, r in rates.items()
                      if self._jobs[n].done >= self._jobs[n].trace.total_samples * (1 - 1e-9) - 1e-6]:
                finished.append(self._finish(n, now, crowd))
                changed = True
            while pending and pending[0].arrival_s <= now:
                self._arrive(pending.pop(0), crowd)
                changed = True
            # A period only matters while jobs contend (someone waits or shares a GPU).
            tick = now >= next_tick - 1e-9 and self._contended()
            if self._jobs and (changed or (tick and paced)):
                spent = self._plan(now)
                round_s, rounds = round_s + spent, rounds + 1
                if paced:  # the round also decided the shares and splits
                    decision_s, decisions = decision_s + spent, decisions + 1
            if tick and not paced and cfg.policy != "even":
                decision_s += self._resplit(now)
                decisions += 1
            while next_tick <= now + 1e-9:
                next_tick += cfg.period_s
        util_trace.append((now, 0.0))
        makespan = now - start
        util = busy_integral / (cfg.num_gpus * makespan) if makespan > 0 else 0.0
        return SimResult(cfg.policy, self._colo.gpu_type, cfg.num_gpus,
                         tuple(sorted(finished, key=lambda j: j.job)), tuple(util_trace),
                         makespan, util, decisions, decision_s, cfg.placement,
                         float(uneven_s / multi_s) if multi_s > 0 else 0.0,
                         cfg.queue, cfg.shares, rounds, round_s,
                         tuple(float(x) for x in idle_integral / (cfg.num_gpus * makespan))
                         if makespan > 0 else (0.0,) * len(IDLE_KINDS))

    def _contended(self) -> bool:
        return any(len(o) > 1 for o in self._occ) or any(not j.gpus for j in self._jobs.values())

    def _arrive(self, job: TraceJob, crowd: float) -> None:
        cost = self._colo.cost(job.model)
        rank = cost.at(job.num_gpus)
        cap = max(2 * cost.profiled_batch, math.ceil(job.global_batch / job.num_gpus))
        self._jobs[job.job] = _Job(job, rank, cap, exclusive_rate_of(rank, job),
                                   crowd_at_arrival=crowd)

    def _unevenness(self, dt: float) -> tuple[float, float]:
        """(multi-GPU job-seconds, of which uneven) over the next `dt`: a job's GPUs are
        unevenly shared when they hold different numbers of jobs, the case re-splitting fixes."""
        multi = [r for r in self._jobs.values() if len(r.gpus) > 1]
        uneven = sum(len({len(self._occ[g]) for g in r.gpus}) > 1 for r in multi)
        return len(multi) * dt, uneven * dt

    def _finish(self, name: str, now: float, crowd: float) -> JobResult:
        run = self._jobs.pop(name)
        for g in run.gpus:
            self._occ[g].remove(name)
        jct = now - run.trace.arrival_s
        alone = run.trace.total_samples / run.exclusive_rate
        # Themis' ideal: a 1/N share of the cluster, N the mean number of jobs present.
        present = (crowd - run.crowd_at_arrival) / jct if jct > 0 else 1.0
        ideal = alone * max(1.0, present * run.trace.num_gpus / self._cfg.num_gpus)
        return JobResult(name, jct / alone, jct, run.trace.arrival_s, now, run.trace.num_gpus,
                         run.started_s, (now - run.started_s) / alone, jct / ideal)
