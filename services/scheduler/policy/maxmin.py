"""`sd-maxmin`: the optimum under the cost model.

Objective (default, `PolicyConfig.maxmin_objective = "sd"`): minimise the
largest *predicted slow-down* SD_j = (e_j + rem_j / r_j) / alone_j, the
quantity the reference equalises: it counts time a job has already lost
(queueing, earlier contention), not just its speed now. For a bound S,
SD_j <= S is linear in the job's rate: r_j >= rem_j / (S alone_j - e_j); the
split LP (`gpufair.scheduler.policy.lp`) tells how far a demand vector can
be scaled, and a Newton-like update on S (each step's rates achieve a
smaller S; it stops when the demands at S are just feasible) finds the
optimum S*. Then water-fill: jobs that hold S* (non-zero dual) are frozen at
it and the rest minimised again (`waterfill_rounds` rounds), and a last LP
spends the leftover capacity on total exclusive-normalised speed.
`maxmin_objective = "rate"` maximises the minimum normalised speed r_j / R_j
instead (instantaneous fairness, blind to history), same machinery.

Speed: jobs interact only through shared GPUs, so each connected component
is its own problem; lone jobs and one-GPU groups of fixed-split jobs have
closed forms (`components`), and one LP serves all remaining components at
once. That LP lives in one HiGHS instance for the whole decision: every
Newton step, round and the leftover LP re-solve it warm from the previous
basis after changing only coefficients, bounds or costs (`lp`), and the
integer splits of all jobs are rounded in one batch (`cost_round`). A loop
that decides every period passes a `WarmStart`: each water-filling round and
the leftover LP then start from the last decision's bases at the same point,
and the SD search from its optimum (`warm`).
Any realisable schedule of any integer split is feasible in the LP, so
its optimum bounds what any integer split can reach; the policy rounds the
per-rank rates to integer batches that keep every rule. The LP may plan GPU
shares a time-sliced GPU never hands out, so the rounded plan is then
checked and improved against the time-slicing model (`realise`), never
ending worse under it than the current or the even splits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from gpufair.common.errors import FailedPrecondition, InvalidArgument
from gpufair.scheduler.policy.base import finalize
from gpufair.scheduler.policy.cost_round import cost_splits
from gpufair.scheduler.policy.components import (Components, find_components, fixed_split,
                                                 lone_job_rates, single_gpu_level)
from gpufair.scheduler.policy.lp import SplitProgram
from gpufair.scheduler.policy.model import exclusive_rate
from gpufair.scheduler.policy.realise import realise
from gpufair.scheduler.policy.simple import current_rates
from gpufair.scheduler.policy.types import ClusterState, Decision, PolicyConfig
from gpufair.scheduler.policy.warm import WarmStart

logger = logging.getLogger(__name__)

OBJECTIVES = ("sd", "rate")
_TIGHT = 1e-9
_NEWTON_TOL = 1e-7
_NEWTON_MAX = 40
_SLACK = 1 - 1e-6  # frozen floors sit under the level: HiGHS is feasible to ~1e-7 only
_EVAL_OVERHEAD = 80  # a model evaluation's fixed cost, in ranks' worth of work


@dataclass(frozen=True)
class LpSolution:
    """Rates per job (samples/s), per-rank sample rates, and the levels reached."""

    rates: np.ndarray
    rank_rates: tuple[np.ndarray, ...]
    min_level: float  # min_j r_j / R_j at the solution ("rate": the max-min optimum)
    max_sd: float = float("inf")  # max predicted SD at the solution ("sd": the optimum)
    objective: str = "sd"


class _Demands:
    """Per-job step-rate demand at a level: rate t -> t R_j / B_j; slow-down
    S -> rem_j / (alone_j (S - m_j) B_j) with m_j = elapsed_j / alone_j.
    Every array is per job of the cluster, in its order."""

    def __init__(self, cluster: ClusterState, objective: str) -> None:
        jobs = cluster.jobs
        self.sd = objective == "sd"
        self.excl = np.array([exclusive_rate(j) for j in jobs])
        self.batch = np.array([j.global_batch for j in jobs], dtype=float)
        alone = np.array([j.samples_total for j in jobs]) / self.excl
        rem = np.array([max(j.samples_total - j.samples_done, 0.0) for j in jobs])
        self.floor = np.array([j.elapsed_s for j in jobs]) / alone
        self.weight = rem / (alone * self.batch)  # step rate x (S - m_j)
        self.wants = rem > 0 if self.sd else np.ones(len(jobs), dtype=bool)

    def at(self, level: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """Step-rate demands of jobs `idx` at their levels (0: wants nothing)."""
        if not self.sd:
            return level * self.excl[idx] / self.batch[idx]
        gap = np.maximum(level - self.floor[idx], 1e-300)
        return np.where(self.wants[idx], self.weight[idx] / gap, 0.0)

    def start(self) -> np.ndarray:
        """A level every job can be asked for: its SD if it ran alone from now on."""
        return self.floor + self.weight * self.batch / self.excl + 1.0 if self.sd \
            else np.ones(len(self.excl))


def _trivial(cluster: ClusterState, comps: Components, dem: _Demands,
             steps: np.ndarray, rank_b: list) -> None:
    """Fill step rates (`steps`, per job) and real per-rank batches (`rank_b`,
    per job an array over its ranks) of the closed-form components."""
    for j, (step_rate, batches) in lone_job_rates(cluster, comps.lone).items():
        steps[j], rank_b[j] = step_rate, batches
    groups = [g for g in comps.single_gpu if dem.wants[list(g)].any()]
    if not groups:
        return
    idx = np.array([j for g in groups for j in g])
    owner = np.repeat(np.arange(len(groups)), [len(g) for g in groups])
    usage = np.array([cluster.jobs[j].ranks[0].step_time(fixed_split(cluster.jobs[j])[0])
                      for j in idx])  # GPU seconds per step
    if dem.sd:
        live = dem.wants[idx]
        level = single_gpu_level(usage, owner, len(groups), np.where(live, dem.floor[idx], -np.inf),
                                 np.where(live, dem.weight[idx], 0.0))[owner]
    else:
        level = (1.0 / np.bincount(owner, weights=usage * dem.excl[idx] / dem.batch[idx]))[owner]
    steps[idx] = dem.at(level, idx)
    for j in idx:
        rank_b[j] = np.array(fixed_split(cluster.jobs[j]), dtype=float)


def _levels(prog: SplitProgram, dem: _Demands, sub: np.ndarray, active: np.ndarray,
            level: np.ndarray, floors: np.ndarray):
    """Optimal level of every component for its active jobs: the last LP
    result and a feasible per-job level (rate: max t; sd: min S).

    Arrays over the listed jobs `sub` (length n) unless named per component
    (length n_comp, indexed by `prog.comp_of`)."""
    if not dem.sd:
        res = prog.solve(np.where(active, dem.at(np.ones(len(sub)), sub), 0.0), floors)
        return res, res.levels[prog.comp_of]
    comp, n_comp = prog.comp_of, prog.n_comp
    floor_sd, weight = dem.floor[sub], dem.weight[sub]
    live = np.bincount(comp, weights=active, minlength=n_comp) > 0
    worst_floor = np.full(n_comp, -np.inf)  # per component
    np.maximum.at(worst_floor, comp[active], floor_sd[active])
    lower, upper = worst_floor.copy(), np.full(n_comp, np.inf)  # bounds on its optimal SD
    # No job's SD can go below its SD at its top step rate. Without this bound a
    # component whose worst job is held by its own top speed (all duals zero)
    # never gets a lower bound and the search stops high after _NEWTON_MAX solves.
    np.maximum.at(lower, comp, np.where(active, floor_sd + weight / prog.top_step_rates, -np.inf))
    target = np.full(n_comp, -np.inf)  # the SD each solve asks of the component
    np.maximum.at(target, comp, level)
    for solves in range(1, _NEWTON_MAX + 1):
        res = prog.solve(np.where(active, dem.at(target[comp], sub), 0.0), floors)
        reached = np.maximum(res.levels, 1e-300)  # per component: how far demands scale
        # Upper bound: the LP's rates reached * demand(S) achieve m + (S - m) / reached.
        got = np.where(active, floor_sd + (target[comp] - floor_sd) / reached[comp], -np.inf)
        achieved = np.full(n_comp, -np.inf)
        np.maximum.at(achieved, comp, got)
        upper = np.where(live, np.minimum(upper, achieved), upper)
        # Lower bound: with this LP's duals fixed, reached(S') <= reached / sum_j
        # dual_j demand_j(S') (weak duality), so reached(S') >= 1 needs sum = reached.
        duals = np.where(active, -res.demand_duals, 0.0)
        has = duals > _TIGHT
        if has.any():
            bound = single_gpu_level(duals[has] / reached[comp[has]], comp[has], n_comp,
                                     floor_sd[has], weight[has])
            some = np.bincount(comp[has], minlength=n_comp) > 0
            lower = np.where(some, np.maximum(lower, bound), lower)
        if np.all(~live | (upper - lower <= _NEWTON_TOL * np.maximum(np.abs(upper), 1.0))):
            break
        with np.errstate(invalid="ignore"):  # dead components hold -inf / inf
            target = np.where(~live, target, np.where(lower > worst_floor, lower,
                                                      worst_floor + 0.5 * (upper - worst_floor)))
    logger.debug("sd-maxmin: %d LP solves for the level", solves)
    return res, upper[comp]


def _remembered_level(start: np.ndarray, names: list[str], comp_of: np.ndarray, n_comp: int,
                      floor: np.ndarray, saved: dict[str, float]) -> np.ndarray:
    """First guess at each component's optimal SD: the largest optimum its jobs
    had last decision (components merge and split between decisions), where
    that is above every job's floor (elapsed time only grows); `start` elsewhere.
    Any guess gives the same optimum; a close one saves LP pivots."""
    old = np.array([saved.get(n, -np.inf) for n in names])
    guess = np.full(n_comp, -np.inf)
    np.maximum.at(guess, comp_of, old)
    top = np.full(n_comp, -np.inf)
    np.maximum.at(top, comp_of, floor)
    return np.where((guess > top)[comp_of], guess[comp_of], start)


def _leftover(prog: SplitProgram, floors: np.ndarray, weights: np.ndarray):
    """The last LP (total normalised speed above the floors); floors relaxed
    step by step if rounding noise made them infeasible (s = 0 always fits)."""
    for relax in (1.0, 1 - 1e-4, 0.0):
        try:
            return prog.solve(np.zeros(len(floors)), floors * relax, throughput=weights)
        except FailedPrecondition:
            logger.warning("sd-maxmin: leftover LP infeasible at floors x %g; relaxing", relax)
    raise FailedPrecondition("sd-maxmin: leftover LP infeasible even without floors")


def _solve_general(cluster: ClusterState, groups: tuple[tuple[int, ...], ...], dem: _Demands,
                   rounds: int, steps: np.ndarray, rank_x: list, warm: WarmStart | None) -> None:
    """Lexicographic rounds plus the leftover LP for components that need it.
    Fills `steps` (per cluster job) and `rank_x` (per cluster job, its ranks'
    sample rates); local arrays are over the listed jobs `sub`."""
    sub = np.array([j for g in groups for j in g], dtype=int)
    comp_of = np.repeat(np.arange(len(groups)), [len(g) for g in groups])
    prog = SplitProgram(cluster, sub, comp_of, warm)
    active = dem.wants[sub].copy()
    floors = np.zeros(len(sub))
    level = dem.start()[sub]
    names = [cluster.jobs[j].job for j in sub]
    if dem.sd:  # one shared starting level per component
        top = np.full(prog.n_comp, -np.inf)
        np.maximum.at(top, comp_of, level)
        level = top[comp_of]
        if warm is not None and warm.levels:
            level = _remembered_level(level, names, comp_of, prog.n_comp, dem.floor[sub],
                                      warm.levels)
    for rnd in range(max(rounds, 1)):
        if not active.any():
            break
        if rnd > 0:
            live = np.bincount(comp_of, weights=active, minlength=prog.n_comp) > 0
            prog.start_round(rnd, tight, live)  # `tight`: what the last round froze
        try:
            res, level = _levels(prog, dem, sub, active, level, floors)
        except FailedPrecondition:
            # Each round freezes jobs at rates HiGHS met only to its 1e-7
            # tolerance; after tens of rounds those floors together can be
            # infeasible. The optimum (round 1) stands; the rest is leftover.
            if rnd == 0:
                raise
            logger.warning("sd-maxmin: water-filling round %d infeasible at the LP's "
                           "tolerance; the leftover LP takes the rest", rnd + 1)
            break
        prog.remember("level", rnd)  # the next decision's round rnd starts from it
        if rnd == 0 and dem.sd and warm is not None:
            warm.levels = dict(zip(names, level.tolist()))
        tight = active & (np.abs(res.demand_duals) > _TIGHT)
        none = np.bincount(comp_of, weights=tight, minlength=prog.n_comp) == 0
        tight |= active & none[comp_of]  # degenerate duals: freeze the whole component
        floors = np.where(tight, dem.at(level, sub) * _SLACK, floors)
        active &= ~tight
    floors = np.where(active, dem.at(level, sub) * _SLACK, floors)
    res = _leftover(prog, floors, dem.batch[sub] / dem.excl[sub])
    prog.remember("throughput")
    # HiGHS meets bounds to 1e-7 absolute: a job planned at a few 1e-6 steps/s
    # may come back percents under its floor (or at 0), which would misstate
    # its SD. Lift such jobs to their floors, keeping their ranks' proportions.
    lifted = np.maximum(res.steps, floors)
    steps[sub] = lifted
    for i, (j, ranks) in enumerate(zip(sub, prog.rank_rates(res))):
        if lifted[i] == res.steps[i]:
            rank_x[j] = ranks
        elif res.steps[i] > 0:
            rank_x[j] = ranks * (lifted[i] / res.steps[i])
        else:
            rank_x[j] = np.full(len(ranks), lifted[i] * dem.batch[j] / len(ranks))


def solve_maxmin(cluster: ClusterState, rounds: int = 2, objective: str = "sd",
                 warm: WarmStart | None = None) -> LpSolution:
    """Lexicographic max-min of the chosen objective (see the module docstring);
    `warm` carries the LP bases from the last call (`policy.warm`)."""
    return _solve(cluster, rounds, objective, warm)[0]


def _solve(cluster: ClusterState, rounds: int, objective: str, warm: WarmStart | None = None
           ) -> tuple[LpSolution, _Demands, Components]:
    if objective not in OBJECTIVES:
        raise InvalidArgument(f"unknown sd-maxmin objective {objective!r}; "
                              f"choose one of {', '.join(OBJECTIVES)}")
    n = len(cluster.jobs)
    dem = _Demands(cluster, objective)
    comps = find_components(cluster)
    if warm is not None:
        warm.pivots = {}  # a decision without an LP takes none
    steps = np.zeros(n)
    per_rank: list = [None] * n
    rank_b: list = [None] * n
    _trivial(cluster, comps, dem, steps, rank_b)
    if comps.general:
        _solve_general(cluster, comps.general, dem, rounds, steps, per_rank, warm)
    for j, job in enumerate(cluster.jobs):
        if per_rank[j] is None:
            b = rank_b[j] if rank_b[j] is not None else np.array(fixed_split(job), dtype=float)
            per_rank[j] = steps[j] * b
    rates = steps * dem.batch
    sds = _slowdowns(cluster, dem.excl, rates)[dem.wants]
    return LpSolution(rates, tuple(per_rank), float(np.min(rates / dem.excl)) if n else 0.0,
                      float(sds.max()) if len(sds) else 1.0, objective), dem, comps


def _slowdowns(cluster: ClusterState, excl: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """`model.slowdown` for every job at once (inf at rate 0)."""
    total = np.array([j.samples_total for j in cluster.jobs])
    rem = np.maximum(total - np.array([j.samples_done for j in cluster.jobs]), 0.0)
    elapsed = np.array([j.elapsed_s for j in cluster.jobs])
    with np.errstate(divide="ignore"):
        return np.where(rates > 0, (elapsed + rem / rates) / (total / excl), np.inf)


def _realise(cluster: ClusterState, general: tuple[tuple[int, ...], ...], excl: np.ndarray,
             splits: dict[int, tuple[int, ...]], lp_bad: np.ndarray, config: PolicyConfig
             ) -> dict[int, tuple[tuple[int, ...], float]]:
    """Per component with a re-splittable job, worst LP bound first, while the
    decision's work budget lasts: the splits `realise` picks under time-slicing
    and each job's predicted badness there (job -> (split, badness)). Components
    the budget does not reach keep the rounded LP plan."""
    out = {}
    comps = sorted(general, key=lambda c: -float(lp_bad[list(c)].max()))
    work = config.realise_work
    for comp in comps:
        jobs = [cluster.jobs[j] for j in comp]
        unit = sum(len(job.ranks) for job in jobs) + _EVAL_OVERHEAD
        evals = min(config.realise_evals, work // unit)
        if evals < 3:  # not even the three starting points: keep the plan
            continue
        got = realise(jobs, [splits.get(j, cluster.jobs[j].split) for j in comp],
                      config.maxmin_objective, config.min_change, evals,
                      float(lp_bad[list(comp)].max()), excl[list(comp)])
        work -= got.evaluations * unit
        for j, split, bad in zip(comp, got.splits, got.badness):
            out[j] = (split, float(bad))
    return out


class SdMaxMinPolicy:
    """Split every multi-GPU job as the lexicographic max-min optimum says."""

    name = "sd-maxmin"

    def decide(self, cluster: ClusterState, config: PolicyConfig,
               warm: WarmStart | None = None) -> dict[str, Decision]:
        """Solve once for the whole cluster and round each job's share."""
        if not cluster.jobs:
            return {}
        sol, dem, comps = _solve(cluster, config.waterfill_rounds, config.maxmin_objective, warm)
        rates, excl = current_rates(cluster), dem.excl
        sd_now, sd_lp = _slowdowns(cluster, excl, rates), _slowdowns(cluster, excl, sol.rates)
        goal = (f"no job's predicted SD need exceed {sol.max_sd:.2f}" if sol.objective == "sd"
                else f"every job can reach >= {sol.min_level:.3f} of its exclusive speed")
        resplit = [j for j, job in enumerate(cluster.jobs) if job.splittable and sol.rates[j] > 0]
        splits = dict(zip(resplit, cost_splits([cluster.jobs[j] for j in resplit],
                                               [sol.rank_rates[j] for j in resplit])))
        lp_bad = sd_lp if sol.objective == "sd" else excl / np.maximum(sol.rates, 1e-300)
        realised = _realise(cluster, comps.general, excl, splits, lp_bad, config) \
            if config.realise_evals else {}
        out = {}
        for j, job in enumerate(cluster.jobs):
            lp_rate = float(sol.rates[j])
            nums = {"sd_now": float(sd_now[j]), "rate_now": float(rates[j]), "lp_rate": lp_rate,
                    "lp_norm_rate": lp_rate / excl[j], "lp_min_norm_rate": sol.min_level,
                    "lp_max_sd": sol.max_sd, "sd_at_lp_rate": float(sd_lp[j])}
            reason = (f"max-min ({sol.objective}): {goal}; this job gets "
                      f"{nums['lp_norm_rate']:.3f} of its exclusive speed (SD "
                      f"{nums['sd_now']:.2f} now, {nums['sd_at_lp_rate']:.2f} at the planned rate)")
            if j in realised:
                split, bad = realised[j]
                splits[j] = split
                nums["time_sliced_" + sol.objective] = bad
                reason += (f"; as a time-sliced GPU runs the chosen splits: "
                           f"{'SD' if sol.objective == 'sd' else 'exclusive/speed'} {bad:.2f}")
            out[job.job] = finalize(job, self.name, splits.get(j, job.split), config, reason, nums)
        return out
