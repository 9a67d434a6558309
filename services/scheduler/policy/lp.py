"""The split LP of the jobs that need one, in a sparse form HiGHS solves fast.

Variables: per job its step rate s_j (steps/s); per splittable job also the
sample rate x_jk of each rank k (samples/s, so x_jk = s_j * b_jk with b_jk
the rank's real-valued batch); per component c one level variable lam_c.

    GPU g:       sum over ranks on g of  a_jk s_j + c_jk x_jk  <= 1
                 (a fixed-split job: (a_jk + c_jk b_jk) s_j)
    batch:       sum_k x_jk = B_j s_j
    >= 1 sample: s_j - x_jk <= 0;   cap:  x_jk - cap_jk s_j <= 0
    demand:      delta_j lam_c - s_j <= 0   (active jobs of component c)
    floors:      s_j >= floor_j              (jobs frozen at their level)

Maximising sum_c lam_c maximises every lam_c on its own, because components
share no constraint: one LP serves every component at once. Each row has
one or two non-zeros per rank, so the matrix stays O(ranks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from gpufair.common.errors import FailedPrecondition
from gpufair.scheduler.policy.components import fixed_split
from gpufair.scheduler.policy.types import ClusterState

_LAM_MAX = 1e12


@dataclass(frozen=True)
class LpResult:
    """One solve: per-job step rates, per-rank sample rates, levels, duals."""

    steps: np.ndarray  # s_j per listed job
    rank_rates: tuple[np.ndarray, ...]  # x_jk per listed job (fixed jobs: s_j * b_jk)
    levels: np.ndarray  # lam_c per component
    demand_duals: np.ndarray  # per listed job, 0 where it had no demand row


class SplitProgram:
    """The static part of the LP for `jobs` (indices into the cluster), built once."""

    def __init__(self, cluster: ClusterState, jobs: Sequence[int], comp_of: Sequence[int]
                 ) -> None:
        self.jobs = list(jobs)
        self.comp_of = np.asarray(comp_of, dtype=int)
        self.n_comp = int(self.comp_of.max()) + 1 if len(self.jobs) else 0
        gpus: dict[str, int] = {}
        rows: list[int] = []  # GPU rows first; bound rows get offset later
        cols: list[int] = []
        vals: list[float] = []
        brow, bcol, bval, erow, ecol, evals = [], [], [], [], [], []
        self.s_col, self.x_cols, self.fixed_b = [], [], []
        n_bnd = n_eq = col = 0
        for i, j in enumerate(self.jobs):
            job = cluster.jobs[j]
            g = [gpus.setdefault(r.gpu, len(gpus)) for r in job.ranks]
            if not job.splittable:
                b = np.array(fixed_split(job), dtype=float)
                self.s_col.append(col)
                self.x_cols.append(None)
                self.fixed_b.append(b)
                rows += g
                cols += [col] * len(g)
                vals += [r.step_time(bk) for r, bk in zip(job.ranks, b)]
                col += 1
                continue
            n = len(g)
            xs = list(range(col, col + n))
            s = col + n
            self.s_col.append(s)
            self.x_cols.append(np.array(xs))
            self.fixed_b.append(None)
            for k, r in enumerate(job.ranks):
                rows += [g[k], g[k]]
                cols += [s, xs[k]]
                vals += [r.sec_per_step, r.sec_per_sample]
                brow += [n_bnd, n_bnd]
                bcol += [s, xs[k]]
                bval += [1.0, -1.0]
                n_bnd += 1
                if r.cap is not None and r.cap < job.global_batch:
                    brow += [n_bnd, n_bnd]
                    bcol += [xs[k], s]
                    bval += [1.0, -float(r.cap)]
                    n_bnd += 1
            erow += [n_eq] * (n + 1)
            n_eq += 1
            ecol += xs + [s]
            evals += [1.0] * n + [-float(job.global_batch)]
            col += n + 1
        self.n_x = col
        self.n_var = col + self.n_comp
        self.static = sp.vstack([
            sp.csr_matrix((vals, (rows, cols)), shape=(len(gpus), self.n_var)),
            sp.csr_matrix((bval, (brow, bcol)), shape=(n_bnd, self.n_var)),
        ]).tocsr()
        self.static_b = np.concatenate([np.ones(len(gpus)), np.zeros(n_bnd)])
        self.a_eq = sp.csr_matrix((evals, (erow, ecol)), shape=(n_eq, self.n_var)) if n_eq else None
        self.s_idx = np.array(self.s_col, dtype=int)

    def solve(self, delta: np.ndarray, floors: np.ndarray,
              throughput: np.ndarray | None = None) -> LpResult:
        """Maximise every component's level lam_c with s_j >= delta_j lam_c for
        jobs with delta_j > 0 and s_j >= floors_j; with `throughput` given
        instead, maximise sum_j throughput_j s_j (levels fixed at 0)."""
        active = np.nonzero(delta > 0)[0]
        m = len(active)
        fair = sp.csr_matrix(
            (np.concatenate([delta[active], -np.ones(m)]),
             (np.tile(np.arange(m), 2),
              np.concatenate([self.n_x + self.comp_of[active], self.s_idx[active]]))),
            shape=(m, self.n_var))
        a_ub = sp.vstack([self.static, fair]).tocsr()
        b_ub = np.concatenate([self.static_b, np.zeros(m)])
        lower = np.zeros(self.n_var)
        lower[self.s_idx] = floors
        upper = np.full(self.n_var, np.inf)
        cost = np.zeros(self.n_var)
        if throughput is None:
            has = np.zeros(self.n_comp, dtype=bool)
            has[self.comp_of[active]] = True
            upper[self.n_x:] = np.where(has, _LAM_MAX, 0.0)
            cost[self.n_x:] = -1.0
        else:
            upper[self.n_x:] = 0.0
            cost[self.s_idx] = -throughput
        res = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=self.a_eq,
                      b_eq=np.zeros(self.a_eq.shape[0]) if self.a_eq is not None else None,
                      bounds=np.column_stack([lower, upper]), method="highs")
        if res.status != 0:
            raise FailedPrecondition(f"sd-maxmin LP failed: {res.message}")
        x = res.x
        duals = np.zeros(len(self.jobs))
        duals[active] = res.ineqlin.marginals[self.static.shape[0]:]
        steps = x[self.s_idx]
        per_rank = tuple(x[xc] if xc is not None else steps[i] * b
                         for i, (xc, b) in enumerate(zip(self.x_cols, self.fixed_b)))
        return LpResult(steps, per_rank, x[self.n_x:], duals)
