"""`sd-maxmin`: the optimum under the cost model.

A linear program over per-(job, rank) sample rates x (samples/s). GPU g's
time is a budget of 1 s/s: every rank on g spends `c * x + a * r_j / B_j`
(per-sample cost plus the fixed step cost at the job's step rate r_j / B_j).
The batch split follows the rates (b_k = B_j x_k / r_j), so ">= 1 sample"
and "<= cap" are linear too. Objective: maximise the minimum exclusive-
normalised rate t = min_j r_j / R_j; then water-fill: jobs whose fairness
row is tight (non-zero dual) are frozen at their level and the rest raised
again; a last LP spends the leftover capacity on total normalised rate.
Jobs that cannot be re-split (one GPU, pinned) enter with their fixed split.
Any realisable schedule of any integer split is feasible here, so the first
round's optimum is an upper bound on the fairness any split can reach.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from gpufair.common.errors import FailedPrecondition
from gpufair.scheduler.policy.base import finalize
from gpufair.scheduler.policy.model import exclusive_rate, slowdown
from gpufair.scheduler.policy.rounding import round_split
from gpufair.scheduler.policy.simple import current_rates
from gpufair.scheduler.policy.types import ClusterState, Decision, PolicyConfig

_TIGHT = 1e-9


@dataclass(frozen=True)
class LpSolution:
    """Rates per job, per-rank rates of splittable jobs, and the max-min level."""

    rates: np.ndarray
    rank_rates: tuple[np.ndarray, ...]
    min_level: float  # first-round optimum: max over splits of min r_j / R_j


class _Program:
    """The constraint matrix, built once per decision, solved several times."""

    def __init__(self, cluster: ClusterState) -> None:
        jobs = cluster.jobs
        gpus: dict[str, int] = {}
        self.offsets, off = [], 0
        for job in jobs:
            self.offsets.append(off)
            off += len(job.ranks) if job.splittable else 1
        self.n_var = off + 1  # the last variable is t
        cap_r, cap_c, cap_v, bnd_r, bnd_c, bnd_v = [], [], [], [], [], []
        n_bnd = 0
        for j, job in enumerate(jobs):
            o, big_b = self.offsets[j], job.global_batch
            g = [gpus.setdefault(r.gpu, len(gpus)) for r in job.ranks]
            a = np.array([r.sec_per_step for r in job.ranks])
            c = np.array([r.sec_per_sample for r in job.ranks])
            if not job.splittable:
                cap_r += g
                cap_c += [o] * len(g)
                cap_v += list((a + c * np.array(job.split)) / big_b)
                continue
            n = len(g)
            cols = list(range(o, o + n))
            for k in range(n):
                cap_r += [g[k]] * n
                cap_c += cols
                cap_v += [a[k] / big_b + (c[k] if m == k else 0.0) for m in range(n)]
                # rank k gets >= 1 sample: r_j / B - x_k <= 0
                bnd_r += [n_bnd] * n
                bnd_c += cols
                bnd_v += [1.0 / big_b - (1.0 if m == k else 0.0) for m in range(n)]
                n_bnd += 1
                cap_k = job.ranks[k].cap
                if cap_k is not None and cap_k < big_b:  # x_k - cap/B * r_j <= 0
                    bnd_r += [n_bnd] * n
                    bnd_c += cols
                    bnd_v += [(1.0 if m == k else 0.0) - cap_k / big_b for m in range(n)]
                    n_bnd += 1
        self.static = sp.vstack([
            sp.csr_matrix((cap_v, (cap_r, cap_c)), shape=(len(gpus), self.n_var)),
            sp.csr_matrix((bnd_v, (bnd_r, bnd_c)), shape=(n_bnd, self.n_var)),
        ]).tocsr()
        self.static_b = np.concatenate([np.ones(len(gpus)), np.zeros(n_bnd)])
        self.excl = np.array([exclusive_rate(job) for job in jobs])
        sizes = [len(job.ranks) if job.splittable else 1 for job in jobs]
        rows = np.repeat(np.arange(len(jobs)), sizes)
        # rate[j] = sum of job j's variables
        self.rate_of = sp.csr_matrix((np.ones(off), (rows, np.arange(off))),
                                     shape=(len(jobs), self.n_var))

    def solve(self, floors: np.ndarray, active: np.ndarray, objective: np.ndarray,
              t_bounds: tuple[float, float | None]):
        """One LP: rows t*R_j - r_j <= 0 for active jobs, -r_j <= -floor otherwise."""
        t_col = sp.csr_matrix((self.excl * active, (np.arange(len(active)),
                                                    np.full(len(active), self.n_var - 1))),
                              shape=(len(active), self.n_var))
        fair = t_col - self.rate_of
        a_ub = sp.vstack([self.static, fair]).tocsr()
        b_ub = np.concatenate([self.static_b, -floors * (~active)])
        bounds = [(0, None)] * (self.n_var - 1) + [t_bounds]
        res = linprog(objective, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
        if res.status != 0:
            raise FailedPrecondition(f"sd-maxmin LP failed: {res.message}")
        return res, res.ineqlin.marginals[self.static.shape[0]:]


def solve_maxmin(cluster: ClusterState, rounds: int = 2) -> LpSolution:
    """Lexicographic max-min normalised rates (see the module docstring)."""
    prog = _Program(cluster)
    n_job = len(cluster.jobs)
    active = np.ones(n_job, dtype=bool)
    floors = np.zeros(n_job)
    max_t = np.zeros(prog.n_var)
    max_t[-1] = -1.0
    first, level = None, 0.0
    for _ in range(max(rounds, 1)):
        res, duals = prog.solve(floors, active, max_t, (level, None))
        level = float(res.x[-1])
        first = level if first is None else first
        tight = active & (np.abs(duals) > _TIGHT)
        if not tight.any():
            tight = active.copy()
        floors[tight] = level * prog.excl[tight] * (1 - 1e-7)
        active &= ~tight
        if not active.any():
            break
    floors[active] = level * prog.excl[active] * (1 - 1e-7)
    total = -(prog.rate_of.T @ (1.0 / prog.excl))
    res, _ = prog.solve(floors, np.zeros(n_job, dtype=bool), np.append(total[:-1], 0.0),
                        (0.0, 0.0))
    x = res.x
    rates = prog.rate_of @ x
    per_rank = tuple(x[o:o + len(job.ranks)] if job.splittable else np.array([rates[j]])
                     for j, (job, o) in enumerate(zip(cluster.jobs, prog.offsets)))
    return LpSolution(rates, per_rank, float(first or 0.0))


class SdMaxMinPolicy:
    """Split every multi-GPU job as the lexicographic max-min LP says."""

    name = "sd-maxmin"

    def decide(self, cluster: ClusterState, config: PolicyConfig) -> dict[str, Decision]:
        """Solve the LP once for the whole cluster and round each job's share."""
        if not cluster.jobs:
            return {}
        sol = solve_maxmin(cluster, config.waterfill_rounds)
        rates = current_rates(cluster)
        out = {}
        for j, job in enumerate(cluster.jobs):
            lp_rate = float(sol.rates[j])
            nums = {"sd_now": slowdown(job, float(rates[j])), "rate_now": float(rates[j]),
                    "lp_rate": lp_rate, "lp_norm_rate": lp_rate / exclusive_rate(job),
                    "lp_min_norm_rate": sol.min_level, "sd_at_lp_rate": slowdown(job, lp_rate)}
            split = job.split
            if job.splittable and lp_rate > 0:
                split = round_split(list(sol.rank_rates[j]), job.global_batch,
                                    [r.cap for r in job.ranks])
            reason = (f"max-min LP: every job can reach >= {sol.min_level:.3f} of its exclusive "
                      f"speed; this job gets {nums['lp_norm_rate']:.3f} (SD {nums['sd_now']:.2f} "
                      f"now, {nums['sd_at_lp_rate']:.2f} at the LP rate)")
            out[job.job] = finalize(job, self.name, split, config, reason, nums)
        return out
