"""Discrete-event simulation of a shared GPU cluster under a split policy.

Between events every job runs at the steady-state speed of the time-slicing
model (`gpufair.scheduler.policy.model`, the same one the policies plan with),
so progress is integrated exactly; events are arrivals, completions and
policy periods.

Placement (one rule for every policy of a comparison, `SimConfig.placement`,
see `sim/placement.py`): by default an arriving job takes the `num_gpus` GPUs
with the fewest occupants (ties broken by a seeded random draw); `packed`
fills the lowest-numbered GPUs first, `random` draws GPUs at random. Every
rule shares GPUs but never puts more than `max_per_gpu` jobs on one; a job
that does not fit waits in a FIFO queue (later jobs may start first if they
fit). Its wait counts in its slow-down
(`sd`, end to end); `run_sd` counts only the time since it was placed, the
part a split policy can change.
A job starts with the even split; every `period_s` the policy sees every
running job (costs as "measured", optionally with noise) and its changed
splits apply at once. Only multi-GPU jobs are ever re-split.
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
from gpufair.scheduler.sim.colocation import Colocation, ModelCost
from gpufair.scheduler.sim.placement import DEFAULT_PLACEMENT, check_placement, choose_gpus
from gpufair.scheduler.sim.result import JobResult, SimResult
from gpufair.scheduler.sim.workload import TraceJob


@dataclass(frozen=True)
class SimConfig:
    """Cluster size, policy and the simulator's knobs (documented defaults)."""

    num_gpus: int
    policy: str
    period_s: float = 60.0
    max_per_gpu: int = 4
    seed: int = 0
    noise: float = 0.0  # relative std-dev of the costs the policy "measures"
    placement: str = DEFAULT_PLACEMENT
    policy_config: PolicyConfig = field(default_factory=PolicyConfig)


@dataclass
class _Running:
    trace: TraceJob
    cost: ModelCost
    gpus: tuple[int, ...]
    split: tuple[int, ...]
    exclusive_rate: float
    started_s: float
    done: float = 0.0


def exclusive_rate_of(cost: ModelCost, job: TraceJob) -> float:
    """Speed with its GPUs to itself and the even split (the SD denominator)."""
    worst = max(even_split(job.global_batch, job.num_gpus))
    return job.global_batch / (cost.sec_per_step + cost.sec_per_sample * worst)


Observer = Callable[[ClusterState, dict[str, Decision]], None]


class Simulator:
    """One run of one policy over one trace; call `run()` once.

    `on_decision`, if given, sees every snapshot the policy decided on and its
    decisions (benchmarks use it to score decisions against other splits)."""

    def __init__(self, colocation: Colocation, trace: tuple[TraceJob, ...], config: SimConfig,
                 on_decision: Observer | None = None) -> None:
        if config.num_gpus < 1 or config.max_per_gpu < 1 or config.period_s <= 0:
            raise InvalidArgument("num_gpus, max_per_gpu and period_s must be positive")
        if not trace:
            raise InvalidArgument("the trace has no jobs")
        get_policy(config.policy)  # unknown names fail before any work
        check_placement(config.placement)
        for job in trace:
            if job.model not in colocation.costs:
                raise InvalidArgument(f"line {job.line}: job {job.job!r}: model {job.model!r} "
                                      f"is not measured on GPU type {colocation.gpu_type!r}")
            if job.num_gpus > config.num_gpus:
                raise InvalidArgument(f"line {job.line}: job {job.job!r} needs {job.num_gpus} "
                                      f"GPUs, the cluster has {config.num_gpus}")
        self._colo, self._cfg, self._observer = colocation, config, on_decision
        self._trace = sorted(trace, key=lambda j: (j.arrival_s, j.line))
        # Separate streams: measurement noise must not shift where jobs land.
        self._rng = np.random.default_rng(config.seed)
        self._noise_rng = np.random.default_rng((config.seed, 1))
        self._occ: list[list[str]] = [[] for _ in range(config.num_gpus)]
        self._running: dict[str, _Running] = {}
        self._queue: list[TraceJob] = []
        self._warm = WarmStart()  # each decision starts from the last one's LP bases

    def _place(self, job: TraceJob, now: float) -> bool:
        gpus = choose_gpus(self._cfg.placement, [len(o) for o in self._occ], job.num_gpus,
                           self._cfg.max_per_gpu, self._rng)
        if gpus is None:
            return False
        for g in gpus:
            self._occ[g].append(job.job)
        cost = self._colo.cost(job.model)
        self._running[job.job] = _Running(job, cost, gpus,
                                          even_split(job.global_batch, job.num_gpus),
                                          exclusive_rate_of(cost, job), now)
        return True

    def _drain_queue(self, now: float) -> None:
        self._queue = [job for job in self._queue if not self._place(job, now)]

    def _states(self, now: float, noisy: bool) -> list[JobState]:
        out = []
        for run in self._running.values():
            ranks = []
            for g, b in zip(run.gpus, run.split):
                neighbours = [self._running[k].trace.model for k in self._occ[g]
                              if k != run.trace.job]
                eta = self._colo.efficiency(run.trace.model, neighbours)
                err = (math.exp(self._noise_rng.normal(0.0, self._cfg.noise))
                       if noisy and self._cfg.noise else 1.0)
                cap = max(2 * run.cost.profiled_batch,
                          math.ceil(run.trace.global_batch / len(run.gpus)))
                ranks.append(RankState(f"gpu-{g}", b, run.cost.sec_per_sample / eta * err,
                                       run.cost.sec_per_step / eta * err, cap))
            out.append(JobState(run.trace.job, run.trace.global_batch, tuple(ranks), run.done,
                                run.trace.total_samples, now - run.trace.arrival_s,
                                None, run.exclusive_rate))
        return out

    def _apply_policy(self, now: float) -> float:
        started = time.perf_counter()
        cluster = ClusterState(tuple(self._states(now, noisy=True)))
        decisions = decide(cluster, self._cfg.policy, self._cfg.policy_config, self._warm)
        spent = time.perf_counter() - started
        if self._observer is not None:
            self._observer(cluster, decisions)
        for name, d in decisions.items():
            if d.changed:
                self._running[name].split = d.split
        return spent

    def run(self) -> SimResult:
        """Simulate until every job has finished."""
        pending = list(self._trace)
        start = now = pending[0].arrival_s
        next_tick = now + self._cfg.period_s
        finished: list[JobResult] = []
        util_trace: list[tuple[float, float]] = []
        busy_integral, decision_s, decisions = 0.0, 0.0, 0
        multi_s = uneven_s = 0.0
        while pending or self._running or self._queue:
            if not self._running and not self._queue:
                now = max(now, pending[0].arrival_s)
            states = self._states(now, noisy=False)
            shared = shared_rates(states)
            rates = dict(zip((s.job for s in states), shared.rates))
            busy = sum(shared.gpu_busy.values())
            horizon = [pending[0].arrival_s] if pending else []
            if self._running:
                horizon.append(next_tick)
                horizon += [now + (r.trace.total_samples - r.done) / rates[n]
                            for n, r in self._running.items()]
            t_next = max(min(horizon), now)
            util_trace.append((now, busy / self._cfg.num_gpus))
            busy_integral += busy * (t_next - now)
            d_multi, d_uneven = self._unevenness(t_next - now)
            multi_s, uneven_s = multi_s + d_multi, uneven_s + d_uneven
            for n, r in self._running.items():
                r.done += rates[n] * (t_next - now)
            now = t_next
            for n in [n for n, r in self._running.items()
                      if r.done >= r.trace.total_samples * (1 - 1e-9) - 1e-6]:
                finished.append(self._finish(n, now))
            while pending and pending[0].arrival_s <= now:
                self._queue.append(pending.pop(0))
            self._drain_queue(now)
            if self._running and now >= next_tick - 1e-9:
                decision_s += self._apply_policy(now)
                decisions += 1
            while next_tick <= now + 1e-9:
                next_tick += self._cfg.period_s
        util_trace.append((now, 0.0))
        makespan = now - start
        util = busy_integral / (self._cfg.num_gpus * makespan) if makespan > 0 else 0.0
        return SimResult(self._cfg.policy, self._colo.gpu_type, self._cfg.num_gpus,
                         tuple(sorted(finished, key=lambda j: j.job)), tuple(util_trace),
                         makespan, util, decisions, decision_s, self._cfg.placement,
                         float(uneven_s / multi_s) if multi_s > 0 else 0.0)

    def _unevenness(self, dt: float) -> tuple[float, float]:
        """(multi-GPU job-seconds, of which uneven) over the next `dt`: a job's GPUs are
        unevenly shared when they hold different numbers of jobs, the case re-splitting fixes."""
        multi = [r for r in self._running.values() if len(r.gpus) > 1]
        uneven = sum(len({len(self._occ[g]) for g in r.gpus}) > 1 for r in multi)
        return len(multi) * dt, uneven * dt

    def _finish(self, name: str, now: float) -> JobResult:
        run = self._running.pop(name)
        for g in run.gpus:
            self._occ[g].remove(name)
        jct = now - run.trace.arrival_s
        alone = run.trace.total_samples / run.exclusive_rate
        return JobResult(name, jct / alone, jct, run.trace.arrival_s, now, run.trace.num_gpus,
                         run.started_s, (now - run.started_s) / alone)
