"""One HiGHS instance as the split LP (`lp`) drives it: loaded from
arrays, started from a basis given as status codes (ints), its basis read
back as codes, and solved with fallbacks for a solve that ends without an
answer. Nothing here knows what the rows and columns mean."""

from __future__ import annotations

import logging

import highspy
import numpy as np
import scipy.sparse as sp

from gpufair.common.errors import FailedPrecondition

logger = logging.getLogger(__name__)

_STATUS = {int(v): v for v in highspy.HighsBasisStatus.__members__.values()}
# Status code -> HiGHS enum, as an array: a basis of thousands converts in one
# indexing step instead of a dict lookup per entry.
_STATUS_OF = np.empty(max(_STATUS) + 1, dtype=object)
_STATUS_OF[list(_STATUS)] = list(_STATUS.values())
BASIC, LOWER = int(highspy.HighsBasisStatus.kBasic), int(highspy.HighsBasisStatus.kLower)
UPPER = int(highspy.HighsBasisStatus.kUpper)
# HiGHS's defaults, for a solve that failed or stalled (an options' pivot cap).
_FALLBACK_OPTIONS = (("simplex_strategy", 1), ("simplex_scale_strategy", 2),
                     ("simplex_primal_edge_weight_strategy", -1),
                     ("primal_simplex_bound_perturbation_multiplier", 1.0),
                     ("simplex_iteration_limit", highspy.kHighsIInf))
_ANSWERED = (highspy.HighsModelStatus.kOptimal, highspy.HighsModelStatus.kInfeasible)


def statuses(h: highspy._Highs, col_up: np.ndarray, row_up: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray] | None:
    """The basis of a solved instance as status codes (column, row), given
    the upper bounds it solved with; None without a solution to read.
    Reading HiGHS's basis builds an enum object per entry (~2.5 ms at 1,000
    jobs on 2,048 GPUs); this reads the basic set and the solution as
    arrays: a nonbasic variable sits exactly on a bound, the upper one or
    else the lower one."""
    status, basic = h.getBasicVariables()
    sol = h.getSolution()
    if status == highspy.HighsStatus.kError or not sol.value_valid:
        return None
    col = np.where(np.asarray(sol.col_value) >= col_up, UPPER, LOWER)
    row = np.where(np.asarray(sol.row_value) >= row_up, UPPER, LOWER)
    col[basic[basic >= 0]] = BASIC
    row[-1 - basic[basic < 0]] = BASIC
    return col, row


def load(mat: sp.csc_matrix, row_lo: np.ndarray, row_up: np.ndarray, col_up: np.ndarray,
         options: tuple, basis: tuple[np.ndarray, np.ndarray], alien: bool) -> highspy._Highs:
    """A silent single-threaded HiGHS instance holding the LP (zero costs,
    columns in [0, col_up]) and starting from `basis` (column, row status
    codes; `alien`: not known to be a basis, see `set_basis`)."""
    # The bare binding: highspy.Highs prints a banner to stdout on first
    # use (it would corrupt `--json` output) and runs each solve in a thread.
    h = highspy._Highs()
    for key, value in (("output_flag", False), ("threads", 1), ("presolve", "off"), *options):
        h.setOptionValue(key, value)
    n_col, n_row = mat.shape[1], mat.shape[0]
    # The array form: filling a HighsLp's fields copies each through a list (~2 ms).
    zeros = np.zeros(n_col)
    status = h.passModel(n_col, n_row, mat.nnz, int(highspy.MatrixFormat.kColwise),
                         int(highspy.ObjSense.kMinimize), 0.0, zeros, zeros, col_up, row_lo,
                         row_up, mat.indptr.astype(np.int32), mat.indices.astype(np.int32),
                         mat.data.astype(float), np.zeros(n_col, dtype=np.int32))  # continuous
    if status == highspy.HighsStatus.kError:
        raise FailedPrecondition("sd-maxmin: HiGHS rejected the split LP")
    set_basis(h, basis, alien)
    return h


def set_basis(h: highspy._Highs, basis: tuple[np.ndarray, np.ndarray],
              alien: bool = False) -> None:
    """Make `basis` (column, row status codes) the next solve's start. An
    `alien` one (mapped from another decision's LP by `warm.restore`) may have
    the wrong number of basic variables or a singular set: HiGHS completes it."""
    start = highspy.HighsBasis()
    start.col_status = _STATUS_OF[basis[0]].tolist()
    start.row_status = _STATUS_OF[basis[1]].tolist()
    start.valid = True
    start.alien = alien
    if h.setBasis(start) == highspy.HighsStatus.kError:  # then HiGHS starts from slacks
        logger.warning("sd-maxmin: HiGHS rejected the starting basis")


def run(h: highspy._Highs) -> int:
    """Solve from the last basis. If that ends without an answer (the tuned
    primal simplex can stall in phase 1 from a primal-infeasible warm basis:
    2 solves in the scheduler benchmark's simulations), go on from where it
    stopped with HiGHS's default simplex, then once more from scratch.
    FailedPrecondition if the LP has no optimum. Returns the pivots taken."""
    h.run()
    pivots = h.getInfo().simplex_iteration_count
    status = h.getModelStatus()
    if status not in _ANSWERED:
        logger.debug("sd-maxmin: LP solve ended %s; going on with the default simplex",
                     h.modelStatusToString(status))
        for key, value in _FALLBACK_OPTIONS:
            h.setOptionValue(key, value)
        h.run()
        pivots += h.getInfo().simplex_iteration_count
        status = h.getModelStatus()
    if status not in _ANSWERED:
        logger.warning("sd-maxmin: LP solve ended %s; solving cold",
                       h.modelStatusToString(status))
        h.clearSolver()
        h.run()
        pivots += h.getInfo().simplex_iteration_count
        status = h.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise FailedPrecondition(f"sd-maxmin LP failed: {h.modelStatusToString(status)}")
    return pivots
