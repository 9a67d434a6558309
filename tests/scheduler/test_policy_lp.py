"""The warm-started split LP and the batched rounding behind sd-maxmin's speed."""

from __future__ import annotations

import logging
import math
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufair.scheduler.policy import ClusterState, JobState, RankState
from gpufair.scheduler.policy import highs, lp
from gpufair.scheduler.policy.components import find_components
from gpufair.scheduler.policy.lp import SplitProgram

from sched_strategies import clusters

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _program(cluster: ClusterState) -> SplitProgram:
    # One level per set of jobs linked by shared GPUs, as sd-maxmin builds it:
    # only then is every level's optimum unique (each is scaled on its own).
    comp = {j: c for c, group in enumerate(find_components(cluster).groups) for j in group}
    n = len(cluster.jobs)
    return SplitProgram(cluster, range(n), [comp[j] for j in range(n)])


@FAST
@given(cluster=clusters(max_gpus=4, max_jobs=5), seed=st.integers(0, 2**31 - 1))
def test_warm_resolves_reach_the_same_optimum_as_a_fresh_program(cluster, seed):
    # The decision re-solves one program with new demands, floors and finally a
    # new objective; each answer must equal a cold solve of that same LP.
    rng = np.random.default_rng(seed)
    n = len(cluster.jobs)
    warm = _program(cluster)
    weights = rng.uniform(0.1, 2.0, n)
    previous = np.zeros(n)  # the last cold solve's step rates: floors below them stay feasible
    for step in range(4):
        delta = np.where(rng.random(n) < 0.8, rng.uniform(0.01, 10.0, n), 0.0)
        floors = rng.uniform(0, 0.3, n) * previous
        throughput = weights if step == 3 else None
        got = warm.solve(delta, floors, throughput)
        cold = _program(cluster).solve(delta, floors, throughput)
        previous = cold.steps
        # HiGHS is feasible to ~1e-7, so values within 1e-6 of each other are the same optimum.
        assert np.allclose(got.levels, cold.levels, rtol=1e-6, atol=1e-6)
        if throughput is not None:
            assert math.isclose(weights @ got.steps, weights @ cold.steps, rel_tol=1e-6,
                                abs_tol=1e-6)


@FAST
@given(cluster=clusters(max_gpus=4, max_jobs=6), seed=st.integers(0, 2**31 - 1))
def test_throughput_lp_reaches_the_optimum_with_either_simplex(cluster, seed):
    # The throughput LP has its own instance, solved by the primal simplex on
    # GPUs shared by ~2 ranks and more, by the dual simplex elsewhere: both
    # must keep the floors and reach the optimum of an independent solve.
    rng = np.random.default_rng(seed)
    n = len(cluster.jobs)
    weights = rng.uniform(0.1, 2.0, n)
    floors = _program(cluster).solve(np.ones(n), np.zeros(n)).steps * rng.uniform(0, 1, n) * 0.999
    for dense in (True, False):
        prog = _program(cluster)
        prog._dense = dense
        got = prog.solve(np.zeros(n), floors, throughput=weights)
        assert np.all(got.steps >= floors - 1e-9)
        _assert_reaches_the_optimum(prog, floors, weights, weights @ got.steps)


def _assert_reaches_the_optimum(prog: SplitProgram, floors: np.ndarray, weights: np.ndarray,
                                got: float) -> None:
    """`got` is the throughput LP's optimum: not below an independent solve's;
    above it only where HiGHS bends a bound within its 1e-7 tolerance (a share
    of -1e-7 at 10 s of GPU time per unit came out 1.1e-6 over it; floors held
    at 1 - 1e-6 of a level's rates, on ranks of 16 samples per GPU-second,
    1.1e-5 over it; 1e-4 leaves ~10x that)."""
    ref = _reference_throughput(prog, floors, weights)
    assert ref * (1 - 1e-6) - 1e-9 <= got <= ref * (1 + 1e-4) + 1e-9


def _reference_throughput(prog: SplitProgram, floors: np.ndarray, weights: np.ndarray) -> float:
    """The throughput LP's optimum by an independent solve (scipy's HiGHS)."""
    from scipy.optimize import linprog
    n = len(floors)
    mat, row_lo, row_up = prog._core
    eq = row_lo == row_up
    up = np.concatenate([prog._top[:prog.lam0 - n], prog.top_step_rates])
    lo = np.zeros(prog.lam0)
    lo[prog.s_idx] = floors
    cost = np.zeros(prog.lam0)
    cost[prog.s_idx] = -weights
    ref = linprog(cost, A_ub=sp.vstack([mat[~eq], -mat[~eq]]),
                  b_ub=np.concatenate([row_up[~eq], -row_lo[~eq]]), A_eq=mat[eq],
                  b_eq=row_up[eq], bounds=np.column_stack([lo, up]), method="highs")
    assert ref.status == 0
    return -ref.fun


@FAST
@given(cluster=clusters(max_gpus=4, max_jobs=6), seed=st.integers(0, 2**31 - 1))
def test_throughput_lp_from_the_level_basis_reaches_the_optimum(cluster, seed):
    # As in a decision: a level solve holds some jobs at the level, their
    # floors go just under the held rates, and the throughput LP starts from
    # the level LP's last basis cut down to its own rows and columns.
    rng = np.random.default_rng(seed)
    n = len(cluster.jobs)
    weights = rng.uniform(0.1, 2.0, n)
    delta = np.where(rng.random(n) < 0.8, rng.uniform(0.01, 10.0, n), 0.0)
    for dense in (True, False):
        prog = SplitProgram(cluster, range(n), np.zeros(n, dtype=int))  # one level for all
        prog._dense = dense
        res = prog.solve(delta, np.zeros(n))
        held = res.demand_duals < -1e-9
        floors = np.where(held, res.steps * (1 - 1e-6), res.steps * rng.uniform(0, 1, n) * 0.999)
        got = prog.solve(np.zeros(n), floors, throughput=weights)
        assert np.all(got.steps >= floors - 1e-9)
        _assert_reaches_the_optimum(prog, floors, weights, weights @ got.steps)


@FAST
@given(cluster=clusters(max_gpus=4, max_jobs=5))
def test_rank_rates_keep_every_split_rule(cluster):
    n = len(cluster.jobs)
    prog = _program(cluster)
    res = prog.solve(np.ones(n), np.zeros(n))
    for job, s, x in zip(cluster.jobs, res.steps, prog.rank_rates(res)):
        assert math.isclose(x.sum(), s * job.global_batch, rel_tol=1e-6, abs_tol=1e-9)
        caps = [r.cap if r.cap is not None else job.global_batch for r in job.ranks]
        assert np.all(x >= s * (1 - 1e-6) - 1e-9)  # at least one sample per rank
        assert np.all(x <= s * np.array(caps) * (1 + 1e-6) + 1e-9)


def test_solving_prints_nothing_to_stdout():
    # `gpufair sim --json` writes JSON to stdout: the LP solver must stay silent,
    # also on its first use in a fresh process (where HiGHS likes to greet).
    code = ("from gpufair.scheduler.policy import ClusterState, JobState, RankState, solve_maxmin\n"
            "r = RankState\n"
            "solve_maxmin(ClusterState((\n"
            "    JobState('w', 20, (r('g0', 10, 0.01), r('g1', 10, 0.02)), 0, 1e4, 10.0),\n"
            "    JobState('v', 20, (r('g1', 10, 0.01), r('g2', 10, 0.01)), 0, 1e4, 0.0))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""


def test_infeasible_floors_are_a_failed_precondition_and_the_program_recovers():
    # sd-maxmin relaxes floors that rounding noise made infeasible: the program
    # must report the infeasible LP as a domain error and still solve afterwards.
    from gpufair.common.errors import FailedPrecondition
    from gpufair.scheduler.policy import JobState, RankState
    r = RankState
    cluster = ClusterState((
        JobState("w", 20, (r("g0", 10, 0.01), r("g1", 10, 0.02)), 0, 1e4, 10.0),
        JobState("v", 20, (r("g1", 10, 0.01), r("g2", 10, 0.01)), 0, 1e4, 0.0),
    ))
    prog = SplitProgram(cluster, [0, 1], [0, 0])
    best = prog.solve(np.zeros(2), np.zeros(2), throughput=np.ones(2))
    with pytest.raises(FailedPrecondition):
        prog.solve(np.zeros(2), best.steps * 2.0, throughput=np.ones(2))
    again = prog.solve(np.zeros(2), np.zeros(2), throughput=np.ones(2))
    assert math.isclose(again.steps.sum(), best.steps.sum(), rel_tol=1e-9)


def test_a_stalled_throughput_solve_falls_back_to_the_defaults(monkeypatch, caplog):
    # The dense path turns off HiGHS's bound perturbation; a solve that hits the
    # stall cap must go on with the defaults and still reach the optimum.
    caplog.set_level(logging.DEBUG, logger=highs.__name__)
    r = RankState
    cluster = ClusterState((
        JobState("a", 40, (r("g0", 20, 0.01, 0.01), r("g1", 20, 0.02)), 0, 1e4, 3.0),
        JobState("b", 30, (r("g1", 15, 0.01), r("g2", 15, 0.03)), 0, 1e4, 0.0),
        JobState("c", 16, (r("g0", 8, 0.02), r("g2", 8, 0.01)), 0, 1e4, 0.0)))
    weights, floors = np.array([1.0, 0.5, 2.0]), np.zeros(3)
    monkeypatch.setattr(lp, "_STALL_PIVOTS", 0)
    prog = _program(cluster)
    prog._dense = True
    got = prog.solve(np.zeros(3), floors, throughput=weights)
    assert "going on with the default simplex" in caplog.text
    assert "solving cold" not in caplog.text  # from where it stopped, not from scratch
    assert float(weights @ got.steps) == pytest.approx(_reference_throughput(prog, floors, weights),
                                                       rel=1e-7)
