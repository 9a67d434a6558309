"""The split LP of the jobs that need one (its matrix: `lp_matrix`), kept
inside HiGHS (`highs`) and re-solved warm.

Successive level solves of one decision differ only in demand
coefficients and floors, so the program is passed to HiGHS once and each
solve starts from the previous optimal basis (dual simplex, no presolve):
tens of pivots instead of thousands. The throughput LP (the objective
sum_j w_j s_j, levels off) gets its own instance without the demand rows
and level columns: re-solved inside the level instance, the dual simplex's
LU factor fills in and each pivot costs several times more. It starts
from the level LP's last basis cut down to its rows and
columns (`_level_basis`). Both instances start from a triangular basis that
already meets every batch row (`lp_matrix.share_basis`), not from the slack basis.
Across decisions, a loop that passes a `WarmStart` (the service leader, the
simulator) starts each water-filling round and the throughput LP from the
previous decision's bases at the same point, mapped by job, rank and GPU
name (`warm`) and completed by HiGHS as alien bases (far fewer pivots a
period, bench/scheduler/HISTORY.md). A mapped basis
can still be poor, so the warm throughput solve is capped
(`_THROUGHPUT_WARM`) and falls back to the cold start. Warm starts and
pivoting rules change the path, not the optimum: every solve is an exact
optimum of its LP. Where an LP has several optima they can change which
one a solve ends in, and with it which jobs water-filling freezes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import highspy
import numpy as np

from gpufair.scheduler.policy import highs, lp_matrix
from gpufair.scheduler.policy.types import ClusterState
from gpufair.scheduler.policy.warm import Keys, SavedBasis, WarmStart, carry, restore

logger = logging.getLogger(__name__)

_LAM_MAX = 1e12  # HiGHS drops demand coefficients under 1e-9: keep lam bounded anyway
# The level LP: the dual simplex, so a basis stays valid while demands and
# floors change; Devex pricing, not HiGHS's default (dual steepest edge): more
# pivots but cheaper ones, faster overall (bench/scheduler/HISTORY.md). Where the LP is
# degenerate it ends in another optimal basis, so a water-filling round may
# freeze another set of jobs at the same optimum.
_LEVEL_OPTIONS = (("simplex_strategy", 1), ("simplex_dual_edge_weight_strategy", 1))
# The throughput LP unscaled (the columns are already in comparable units;
# scaling saved pivots but cost time). With ~2 ranks per GPU and more the
# basis fills in and the dual simplex's updates turn dense, so the primal
# simplex is faster there, the dual simplex with Devex pricing on sparser
# clusters. The primal simplex prices by Dantzig and does not perturb
# bounds: removing the perturbation at the end cost a third of the time
# (figures for each choice: bench/scheduler/HISTORY.md).
_DENSE_RANKS_PER_GPU = 1.4
_THROUGHPUT_DENSE = (("simplex_strategy", 4), ("simplex_scale_strategy", 0),
                     ("simplex_primal_edge_weight_strategy", 0),
                     ("primal_simplex_bound_perturbation_multiplier", 0.0))
_THROUGHPUT_SPARSE = (("simplex_strategy", 1), ("simplex_scale_strategy", 0),
                      ("simplex_dual_edge_weight_strategy", 1))
# From the last decision's basis: the primal simplex, scaled, since a mapped
# basis can be ill-conditioned. If it needs more than a quarter as many
# pivots as the LP has rows (a cold solve takes about one per row), it is
# abandoned for the cold start.
_THROUGHPUT_WARM = (*_THROUGHPUT_DENSE[:1], ("simplex_scale_strategy", 2), *_THROUGHPUT_DENSE[2:])
_WARM_PIVOTS_PER_ROW, _WARM_PIVOTS_MIN = 0.25, 50
# Without bound perturbation a degenerate primal simplex could stall: cap its
# pivots at this many per row and column (measured: under 1 per row) and fall
# back to the defaults if it is reached.
_STALL_PIVOTS = 10


@dataclass(frozen=True)
class LpResult:
    """One solve: per-job step rates, per-rank sample rates, levels, duals."""

    steps: np.ndarray  # s_j per listed job
    shares: np.ndarray  # y_jk per splittable rank (see SplitProgram.rank_rates)
    levels: np.ndarray  # lam_c per component
    demand_duals: np.ndarray  # per listed job (<= 0), 0 where it had no demand


class SplitProgram:
    """The LP for `jobs` (indices into the cluster), built once, solved warm."""

    def __init__(self, cluster: ClusterState, jobs: Sequence[int], comp_of: Sequence[int],
                 warm: WarmStart | None = None) -> None:
        self.jobs = list(jobs)
        n = len(self.jobs)
        self.comp_of = np.asarray(comp_of, dtype=int)
        self.n_comp = int(self.comp_of.max()) + 1 if n else 0
        flex = np.array([cluster.jobs[j].splittable for j in self.jobs], dtype=bool)
        big_b = np.array([cluster.jobs[j].global_batch for j in self.jobs], dtype=float)
        rk = lp_matrix.gather(cluster, self.jobs, flex)
        n_y = int(flex[rk.owner].sum())
        self.s_idx = n_y + np.arange(n)
        self.lam0 = n_y + n
        self.n_var = self.lam0 + self.n_comp
        mat, row_lo, row_up, self._fair0 = lp_matrix.assemble(rk, flex, big_b, self.n_comp)
        self._owner, self._flex_rank, self._fixed_b = rk.owner, flex[rk.owner], rk.fixed_b
        self._b_rank = big_b[rk.owner]
        self._rank_start = np.cumsum(np.bincount(rk.owner, minlength=n))[:-1]
        self._top = lp_matrix.implied_upper(rk, flex, big_b)
        row_lo = lp_matrix.implied_row_floor(mat, row_lo, self._top)
        self._delta = np.zeros(n)  # demand coefficients HiGHS holds now
        self._cost = np.zeros(self.n_var)  # and its objective
        self._basis = lp_matrix.share_basis(rk, flex, mat.shape, self._fair0 - int(flex.sum()),
                                            highs.BASIC, highs.LOWER)
        self._warm = warm
        self._keys = lp_matrix.keys(rk, flex, big_b, [cluster.jobs[j].job for j in self.jobs],
                                    self.comp_of, mat.shape) if warm is not None else None
        self._carried: list[tuple[Keys, np.ndarray, np.ndarray]] = []  # old keys, carry()
        alien = warm is not None and bool(warm.rounds)
        start = self._restore(warm.rounds[0], self._basis) if alien else self._basis
        self._row_up, self._lam_up = row_up, np.full(self.n_comp, _LAM_MAX)
        self._level_solved = False  # no water-filling round ran yet (none may: nothing active)
        self._highs = highs.load(mat, row_lo, row_up, np.concatenate([self._top, self._lam_up]),
                                 _LEVEL_OPTIONS, start, alien)
        # The throughput LP: rows and columns before the demand rows and levels.
        self._core = mat[:self._fair0, :self.lam0], row_lo[:self._fair0], row_up[:self._fair0]
        self._dense = len(rk.gpu) >= _DENSE_RANKS_PER_GPU * (int(rk.gpu.max(initial=-1)) + 1)
        self._throughput: highspy._Highs | None = None  # loaded on first use
        self.pivots = {"level": 0, "throughput": 0}  # simplex pivots so far, per instance

    @property
    def top_step_rates(self) -> np.ndarray:
        """Per job (in `jobs` order), the most steps/s it could run with its GPUs
        to itself: an upper bound on its step rate in every solve."""
        return self._top[self.s_idx]

    def _set_demands(self, delta: np.ndarray) -> None:
        """Change only the demand coefficients that moved since the last solve."""
        change, moved = self._highs.changeCoeff, np.nonzero(delta != self._delta)[0]
        rows, cols = self._fair0 + moved, self.lam0 + self.comp_of[moved]
        for row, col, value in zip(rows.tolist(), cols.tolist(), delta[moved].tolist()):
            change(row, col, value)
        self._delta = delta.copy()

    def solve(self, delta: np.ndarray, floors: np.ndarray,
              throughput: np.ndarray | None = None) -> LpResult:
        """Maximise every component's level lam_c with s_j >= delta_j lam_c for
        jobs with delta_j > 0 and s_j >= floors_j; with `throughput` given
        instead, maximise sum_j throughput_j s_j (levels fixed at 0)."""
        if throughput is not None:
            return self._max_throughput(np.asarray(floors, dtype=float), throughput)
        solver, n = self._highs, len(self.jobs)  # arrays below: per listed job unless per component
        delta = np.where(delta > 0, delta, 0.0)
        # A component whose demands are all small (its only active job nearly
        # done: ~1e-8 steps/s per unit of level, levels ~1e8) ends "Unknown"
        # in HiGHS: hold its level in units that make its largest demand 1.
        # Components with a demand >= 1 stay unscaled. The geometric mean
        # as the unit cost dual accuracy (SD search 4e-5 high), and scaling every
        # component by its largest pushed demands 1e9 smaller under HiGHS's
        # 1e-9 small_matrix_value, silently dropping them.
        scale = np.zeros(self.n_comp)
        np.maximum.at(scale, self.comp_of, delta)
        scale = np.where((scale > 0) & (scale < 1), scale, 1.0)
        delta = delta / scale[self.comp_of]
        cost = np.zeros(self.n_var)
        # lam <= s_max / delta of every active job: implied, and it keeps
        # the column boxed (see lp_matrix.implied_row_floor).
        on = delta > 0
        lam_up = np.full(self.n_comp, _LAM_MAX)
        np.minimum.at(lam_up, self.comp_of[on], self._top[self.s_idx[on]] / delta[on])
        lam_up[np.bincount(self.comp_of[on], minlength=self.n_comp) == 0] = 0.0
        cost[self.lam0:] = -1.0
        self._set_demands(delta)
        if not np.array_equal(cost, self._cost):
            solver.changeColsCost(self.n_var, np.arange(self.n_var, dtype=np.int32), cost)
            self._cost = cost
        solver.changeColsBounds(n, self.s_idx.astype(np.int32), np.asarray(floors, dtype=float),
                           self._top[self.s_idx])
        solver.changeColsBounds(self.n_comp, (self.lam0 + np.arange(self.n_comp)).astype(np.int32),
                           np.zeros(self.n_comp), lam_up)
        self._lam_up = lam_up
        self.pivots["level"] += highs.run(solver)
        self._level_solved = True
        sol = solver.getSolution()
        values = np.asarray(sol.col_value)  # each read of a solution field copies it
        if np.any(lam_up[values[self.lam0:] <= 0] > 0):
            # A component with an active job always has some level > 0 left.
            # Zero is a numerical failure (seen from a warm basis when one
            # component's demands span 1e12): solve again from the cold start.
            logger.debug("sd-maxmin: level LP returned a zero level; solving from the cold basis")
            highs.set_basis(solver, self._basis)
            self.pivots["level"] += highs.run(solver)
            sol = solver.getSolution()
            values = np.asarray(sol.col_value)
        duals = np.asarray(sol.row_dual)[self._fair0:self._fair0 + n]
        # Back to the caller's units: lam = lam' / scale, and the objective
        # sum lam' weighs each component by its scale, so the duals too.
        return LpResult(values[self.s_idx], values[:self.lam0 - n], values[self.lam0:] / scale,
                        np.where(delta > 0, duals / scale[self.comp_of], 0.0))

    def _level_basis(self) -> tuple[np.ndarray, np.ndarray]:
        """The level LP's last basis cut down to the throughput LP (about half
        the pivots of a cold start, bench/scheduler/HISTORY.md).
        Dropping the levels and demand rows leaves one basic too many per
        held job beyond each component's level; those jobs' step rates
        (smallest duals first) go to their floors, which sit just under the
        held rates. The share basis where that count does not work out, or
        where no level LP was solved."""
        n = len(self.jobs)
        statuses = self._level_statuses() if self._level_solved else None
        if statuses is None:
            return self._basis[0][:self.lam0], self._basis[1][:self._fair0]
        col, rows = statuses[0][:self.lam0], statuses[1]
        row = rows[:self._fair0]
        excess = int((col == highs.BASIC).sum() + (row == highs.BASIC).sum()) - self._fair0
        held = (rows[self._fair0:self._fair0 + n] != highs.BASIC) & (col[self.s_idx] == highs.BASIC)
        if excess < 0 or excess > held.sum():
            return self._basis[0][:self.lam0], self._basis[1][:self._fair0]
        dual = np.abs(np.asarray(self._highs.getSolution().row_dual)[self._fair0:self._fair0 + n])
        jobs = np.nonzero(held)[0]
        col[self.s_idx[jobs[np.argsort(dual[jobs], kind="stable")[:excess]]]] = highs.LOWER
        return col, row

    def _max_throughput(self, floors: np.ndarray, throughput: np.ndarray) -> LpResult:
        """Maximise sum_j throughput_j s_j with s_j >= floors_j (levels 0)."""
        warm_first = False
        if self._throughput is None:
            saved = self._warm.throughput if self._warm is not None else None
            if saved is None:
                self._throughput = highs.load(*self._core, self._top,
                                              self._throughput_options(), self._level_basis(),
                                              False)
            else:
                # Unknown names take the share basis's statuses, which need
                # nothing else (filled from the level basis, some warm starts
                # ran 2x the cold solve's time).
                start = self._restore(saved, (self._basis[0][:self.lam0],
                                              self._basis[1][:self._fair0]))
                self._throughput = highs.load(*self._core, self._top, _THROUGHPUT_WARM, start, True)
                warm_first = True
        solver, n = self._throughput, len(self.jobs)
        cost = np.zeros(self.lam0)
        cost[self.s_idx] = -throughput
        solver.changeColsCost(self.lam0, np.arange(self.lam0, dtype=np.int32), cost)
        solver.changeColsBounds(n, self.s_idx.astype(np.int32), floors, self._top[self.s_idx])
        if not (warm_first and self._solved_warm(solver)):
            self.pivots["throughput"] += highs.run(solver)
        values = np.asarray(solver.getSolution().col_value)
        return LpResult(values[self.s_idx], values[:self.lam0 - n], np.zeros(self.n_comp), np.zeros(n))

    def _solved_warm(self, solver: highspy._Highs) -> bool:
        """One attempt from the last decision's basis, capped (see
        _THROUGHPUT_WARM). Either way `solver` then has the cold solve's options,
        and if the attempt failed, the cold start (the level LP's basis)."""
        solver.setOptionValue("simplex_iteration_limit",
                         max(_WARM_PIVOTS_MIN, int(_WARM_PIVOTS_PER_ROW * self._fair0)))
        solver.run()
        pivots = solver.getInfo().simplex_iteration_count
        self.pivots["throughput"] += pivots
        solved = solver.getModelStatus() == highspy.HighsModelStatus.kOptimal
        for key, value in self._throughput_options():
            solver.setOptionValue(key, value)
        if not solved:
            logger.debug("sd-maxmin: leftover LP unsolved after %d pivots from the last "
                         "decision's basis; starting cold", pivots)
            highs.set_basis(solver, self._level_basis())
        return solved

    def start_round(self, r: int, frozen: np.ndarray, live: np.ndarray) -> None:
        """Water-filling round `r` (0-based, >= 1), after the last round froze
        the jobs `frozen` (in `jobs` order) and left components `live` (per
        component: some job still active). It starts from the basis the last
        decision's level LP had after its round r, where it ran one. From
        this decision's first-round optimum instead, the second round
        re-solved every component. Without it, from the last round's optimum
        with each frozen job's step rate moved onto its new floor (its demand
        row, whose level coefficient is now 0, goes basic in its place) and
        each dead component's level onto 0 (pivot counts: bench/scheduler/HISTORY.md)."""
        if self._warm is not None and len(self._warm.rounds) > r:
            highs.set_basis(self._highs, self._restore(self._warm.rounds[r], self._basis), True)
            return
        statuses = self._level_statuses()
        if statuses is None:
            return  # nothing solved to start from: HiGHS keeps what it has
        col, row = statuses
        jobs = np.nonzero(frozen)[0]
        row[self._fair0 + jobs] = highs.BASIC
        s = self.s_idx[jobs]
        col[s[col[s] == highs.BASIC]] = highs.LOWER
        col[self.lam0 + np.nonzero(~live)[0]] = highs.LOWER
        highs.set_basis(self._highs, (col, row), True)  # HiGHS evens out the count

    def _level_statuses(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The level instance's basis as status codes (`highs.statuses`)."""
        return highs.statuses(self._highs, np.concatenate([self._top, self._lam_up]), self._row_up)

    def _restore(self, saved: SavedBasis, fill: tuple[np.ndarray, np.ndarray]
                 ) -> tuple[np.ndarray, np.ndarray]:
        """`saved` mapped onto this program (`warm.carry`, once per saved
        program), `fill`'s statuses where it has no counterpart."""
        for keys, cols, rows in self._carried:  # at most one per round, usually one
            if keys is saved.keys:
                break
        else:
            cols, rows = carry(saved.keys, self._keys)
            self._carried.append((saved.keys, cols, rows))
        return restore(saved, cols[:len(fill[0])], rows[:len(fill[1])], fill)

    def _throughput_options(self) -> tuple:
        """The cold throughput solve's options (see _THROUGHPUT_DENSE), with
        the pivot cap that catches a stall."""
        return (*(_THROUGHPUT_DENSE if self._dense else _THROUGHPUT_SPARSE),
                ("simplex_iteration_limit", _STALL_PIVOTS * sum(self._core[0].shape)))

    def remember(self, which: str, r: int = 0) -> None:
        """Save the "level" instance's basis after water-filling round `r`, or
        the "throughput" instance's, into the `warm` given at construction (a
        no-op without one): the next decision's program starts from it."""
        if self._warm is None:
            return
        self._warm.pivots = dict(self.pivots)  # the last call, at the decision's end, has all
        solver = self._highs if which == "level" else self._throughput
        if solver is None:
            return
        statuses = self._level_statuses() if which == "level" else \
            highs.statuses(solver, self._top, self._core[2])
        if statuses is None:
            return
        kept = SavedBasis(self._keys, *statuses)
        if which == "throughput":
            self._warm.throughput = kept
        else:  # rounds run in order, so 0..r-1 are saved: replace round r or append it
            self._warm.rounds[r:r + 1] = [kept]

    def rank_rates(self, res: LpResult) -> tuple[np.ndarray, ...]:
        """Per listed job, its ranks' sample rates x_jk (fixed jobs: s_j b_jk)."""
        s = res.steps[self._owner]
        flat = s * self._fixed_b
        flat[self._flex_rank] = s[self._flex_rank] + self._b_rank[self._flex_rank] * res.shares
        return tuple(np.split(flat, self._rank_start))
