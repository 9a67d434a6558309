"""sd-maxmin's LP bases carried across decisions (`policy.warm`)."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufair.scheduler.policy import (ClusterState, JobState, RankState, WarmStart, decide,
                                      exclusive_rate, solve_maxmin)
from gpufair.scheduler.policy import highs, lp, lp_matrix
from gpufair.scheduler.policy.warm import Keys, SavedBasis, carry, restore
from gpufair.scheduler.sim.synthetic import next_period, synthetic_cluster

from sched_strategies import STRESS_EXAMPLES, clusters

BASIC, LOWER = 1, 0


def _warm_and_cold_one_period_on(before: ClusterState, n_gpus: int, seed: int,
                                  churn: float) -> tuple[int, int]:
    """Leftover-LP pivots of the decision one period after `before`, warm from
    `before`'s decision and cold; both must reach the same max SD."""
    warm, cold = WarmStart(), WarmStart()
    after = next_period(before, decide(before, "sd-maxmin", None, warm), n_gpus, seed, (1, 8),
                        churn=churn)
    job = after.jobs[0].job
    hot = decide(after, "sd-maxmin", None, warm)[job]
    fresh = decide(after, "sd-maxmin", None, cold)[job]
    assert hot.numbers["lp_max_sd"] == pytest.approx(fresh.numbers["lp_max_sd"], rel=1e-6)
    return warm.pivots["throughput"], cold.pivots["throughput"]


def _keyed_matrix(cluster: ClusterState, comp_of) -> tuple[Keys, np.ndarray]:
    """The keys and the (dense) matrix of the split LP over all of `cluster`'s jobs."""
    flex = np.array([j.splittable for j in cluster.jobs], dtype=bool)
    big_b = np.array([j.global_batch for j in cluster.jobs], dtype=float)
    rk = lp_matrix.gather(cluster, range(len(cluster.jobs)), flex)
    comp = np.asarray(comp_of, dtype=int)
    mat = lp_matrix.assemble(rk, flex, big_b, int(comp.max()) + 1)[0].toarray()
    return lp_matrix.keys(rk, flex, big_b, [j.job for j in cluster.jobs], comp, mat.shape), mat


def _keys(cluster: ClusterState, comp_of) -> Keys:
    return _keyed_matrix(cluster, comp_of)[0]


def _named(k: Keys) -> tuple[dict, dict]:
    """Position of every column and row by a name: the job's, the GPU's, a
    rank's (job, index, GPU), or a component's first job's."""
    cols, rows = {}, {}
    for j, job in enumerate(k.jobs):
        cols[("s", job)], rows[("demand", job)] = k.job_cols[j, 0], k.job_rows[j, 1]
        if k.job_cols[j, 1] >= 0:
            cols[("lam", job)] = k.job_cols[j, 1]
        if k.job_rows[j, 0] >= 0:
            rows[("batch", job)] = k.job_rows[j, 0]
        for i, r in enumerate(range(k.rank_start[j], k.rank_start[j + 1])):
            rank = (job, i, k.gpus[k.rank_gpu[r]])
            if k.rank_cols[r] >= 0:
                cols[("y", *rank)] = k.rank_cols[r]
            if k.rank_rows[r] >= 0:
                rows[("cap", *rank)] = k.rank_rows[r]
    rows.update({("gpu", gpu): k.gpu_rows[g] for g, gpu in enumerate(k.gpus)})
    assert sorted(cols.values()) == list(range(k.shape[1]))  # every column named once
    assert sorted(rows.values()) == list(range(k.shape[0]))
    return cols, rows


def _saved(k: Keys, cols: dict, rows: dict) -> SavedBasis:
    """A basis given by name for every column and row of `k`."""
    col_at, row_at = _named(k)
    col, row = np.zeros(k.shape[1], dtype=int), np.zeros(k.shape[0], dtype=int)
    col[[col_at[n] for n in cols]], row[[row_at[n] for n in rows]] = list(cols.values()), \
        list(rows.values())
    assert len(cols) == k.shape[1] and len(rows) == k.shape[0]
    return SavedBasis(k, col, row)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(max_gpus=5, max_jobs=6), pair=st.booleans())
def test_keys_name_the_matrix_columns_and_rows_they_point_at(cluster, pair):
    n = len(cluster.jobs)
    comp = np.arange(n) // 2 if pair else np.arange(n)
    k, mat = _keyed_matrix(cluster, comp)
    flex = np.array([j.splittable for j in cluster.jobs], dtype=bool)
    n_y = int(sum(len(j.ranks) for j in cluster.jobs if j.splittable))
    for j, job in enumerate(cluster.jobs):
        s, demand = k.job_cols[j, 0], k.job_rows[j, 1]
        assert mat[demand, s] == -1 and np.count_nonzero(mat[demand]) == 1
        assert k.job_cols[j, 1] == (n_y + n + comp[j] if j == np.argmax(comp == comp[j]) else -1)
        for i, r in enumerate(range(k.rank_start[j], k.rank_start[j + 1])):
            assert k.gpus[k.rank_gpu[r]] == job.ranks[i].gpu
            y = k.rank_cols[r]
            assert (y >= 0) == flex[j] and (k.job_rows[j, 0] >= 0) == flex[j]
            if y >= 0:  # its GPU's row holds its time per sample, its job's batch row a 1
                assert mat[k.gpu_rows[k.rank_gpu[r]], y] > 0 and mat[k.job_rows[j, 0], y] == 1
                assert set(np.nonzero(mat[:, y])[0]) == {k.gpu_rows[k.rank_gpu[r]],
                                                         k.job_rows[j, 0]} | (
                    {k.rank_rows[r]} if k.rank_rows[r] >= 0 else set())
            else:
                assert k.rank_rows[r] == -1


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(old=clusters(max_gpus=5, max_jobs=6), new=clusters(max_gpus=5, max_jobs=6),
       pairs=st.tuples(st.booleans(), st.booleans()), shuffle=st.randoms(use_true_random=False))
def test_carry_maps_every_column_and_row_to_the_one_of_the_same_name(old, new, pairs, shuffle):
    # Clusters reuse job and GPU names with other ranks, GPUs, caps and pins;
    # the new one lists its jobs in another order and may group them into
    # components differently, so a component's first job can change.
    jobs = list(new.jobs)
    shuffle.shuffle(jobs)
    new = ClusterState(tuple(jobs))
    ko = _keys(old, [j // 2 if pairs[0] else j for j in range(len(old.jobs))])
    kn = _keys(new, [j // 2 if pairs[1] else j for j in range(len(new.jobs))])
    (old_cols, old_rows), (new_cols, new_rows) = _named(ko), _named(kn)
    cols, rows = carry(ko, kn)
    assert cols.tolist() == [old_cols.get(n, -1) for n in sorted(new_cols, key=new_cols.get)]
    assert rows.tolist() == [old_rows.get(n, -1) for n in sorted(new_rows, key=new_rows.get)]


def test_restore_keeps_carried_statuses_and_fills_the_rest():
    k = _keys(_shared_cluster(), [0] * 6)
    saved = SavedBasis(k, np.array([BASIC, LOWER, BASIC]), np.array([LOWER, BASIC]))
    col, row = restore(saved, np.array([1, 0, -1, 5]), np.array([1, 0, -1]),
                       (np.full(4, 7), np.full(3, 7)))
    assert col.tolist() == [LOWER, BASIC, 7, 7]  # 5: past the saved (leftover LP's) columns
    assert row.tolist() == [BASIC, LOWER, 7]


def test_a_warm_start_after_churn_beats_a_cold_one_and_agrees_with_it():
    # One period on, with the 5 of 100 jobs furthest along replaced: the saved
    # basis minus the departed jobs' columns plus cold statuses for the new
    # ones is no basis, and HiGHS completes it as an alien one (a later test
    # has the case the old count repair lost).
    for seed in range(4):
        hot, cold = _warm_and_cold_one_period_on(synthetic_cluster(100, 200, seed), 200, seed,
                                                 churn=0.05)
        assert hot < cold / 2


@settings(max_examples=STRESS_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(chain=st.lists(clusters(max_gpus=6, max_jobs=8), min_size=2, max_size=3))
def test_stress_a_warm_start_from_other_clusters_reaches_the_same_optimum(chain):
    # Every cluster names jobs j0.. and GPUs g0..: each reuses the last one's
    # names with other GPUs, rank counts, caps and pins, the worst case for
    # name mapping. Each objective's optimum is unique; the other number
    # depends on which of several optimal plans the solver returns. 1e-3:
    # on such clusters (demands 1e9 apart, profiles far off the costs) the
    # SD search's dual bound and the floors' 1e-4 relaxation leave warm and
    # cold up to ~3e-4 apart, either one the higher (stress, 4,000 chains).
    warm = WarmStart()
    decide(chain[0], "sd-maxmin", None, warm)
    for cluster in chain[1:]:
        hot = solve_maxmin(cluster, objective="sd", warm=warm)
        assert hot.max_sd == pytest.approx(solve_maxmin(cluster, objective="sd").max_sd,
                                           rel=1e-3)
        hot = solve_maxmin(cluster, objective="rate", warm=warm)
        assert hot.min_level == pytest.approx(solve_maxmin(cluster, objective="rate").min_level,
                                              rel=1e-3, abs=1e-12)
        decide(cluster, "sd-maxmin", None, warm)


def _shared_cluster(cost_scale: float = 1.0) -> ClusterState:
    """Six 2- and 3-GPU jobs criss-crossing four GPUs: one component, an LP to solve."""
    layout = [(0, 1), (1, 2), (2, 3), (3, 0), (0, 1, 2), (1, 2, 3)]
    jobs = []
    for j, gpus in enumerate(layout):
        b = 64 * len(gpus)
        ranks = tuple(RankState(f"g{g}", b // len(gpus), cost_scale * 1e-3 * (1 + (j + g) % 4),
                                0.01 * (1 + j % 3)) for g in gpus)
        jobs.append(JobState(f"j{j}", b, ranks, 1e4 * j, 1e5, 100.0 * (j + 1)))
    return ClusterState(tuple(jobs))


def test_an_unchanged_cluster_is_re_solved_without_throughput_pivots():
    cluster, warm = _shared_cluster(), WarmStart()
    first = decide(cluster, "sd-maxmin", None, warm)
    assert warm.rounds and warm.pivots["throughput"] > 0
    again = decide(cluster, "sd-maxmin", None, warm)
    # The saved optimal basis is optimal again: no pivot in the last LP.
    assert warm.pivots["throughput"] == 0
    assert {j: d.split for j, d in again.items()} == {j: d.split for j, d in first.items()}


def test_other_policies_accept_and_ignore_a_warm_start():
    cluster, warm = _shared_cluster(), WarmStart()
    for policy in ("even", "balance", "sd-feedback"):
        assert decide(cluster, policy, None, warm) == decide(cluster, policy)
    assert not warm.rounds


def test_a_drifted_cluster_decides_the_same_level_warm_as_cold():
    warm = WarmStart()
    decide(_shared_cluster(), "sd-maxmin", None, warm)
    later = _shared_cluster(cost_scale=1.1)
    later = dataclasses.replace(later, jobs=later.jobs[1:])  # j0 finished
    hot = decide(later, "sd-maxmin", None, warm)
    cold = decide(later, "sd-maxmin")
    assert set(hot) == {j.job for j in later.jobs}
    assert hot["j1"].numbers["lp_max_sd"] == pytest.approx(cold["j1"].numbers["lp_max_sd"],
                                                           rel=1e-6)


def test_a_warm_basis_that_once_gave_a_zero_level_reaches_the_cold_optimum():
    # Found by a random search: from this saved basis (another cluster's, whose
    # jobs reused these names) the level LP of a component whose demands span
    # 1e12 (j0 has 1 sample left, j6 lost hours) came back "optimal" at level
    # 0, and the SD search diverged to a job at rate 0 (max SD inf). Since
    # alien bases, HiGHS no longer ends there; the next test forces that end.
    r = RankState
    cluster = ClusterState(
        (JobState("j0", 18, (r("g0", 9, 0.0625), r("g1", 9, 0.0625)), 100000.0, 100001.0,
                  0.0, None, 1.0),)
        + tuple(JobState(f"j{j}", 1, (r("g0", 1, 0.0625),), 0.0, 100001.0) for j in range(1, 6))
        + (JobState("j6", 94, (r("g1", 94, 0.09375),), 0.0, 100001.0, 7526.0, None, 42260.0),))
    # The other cluster: j0 on one GPU, j1-j6 re-split over these GPUs.
    layout = [("g0",), ("g0", "g1", "g2"), ("g0", "g1"), ("g0", "g1", "g2"), ("g0", "g1", "g2"),
              ("g0", "g2", "g3"), ("g0", "g2", "g3")]
    other = ClusterState(tuple(JobState(f"j{j}", 4, tuple(r(g, 1, 0.0625) for g in gpus))
                               for j, gpus in enumerate(layout)))
    y = {("j1", 0, "g0"): 0, ("j1", 1, "g1"): 0, ("j1", 2, "g2"): 1, ("j2", 0, "g0"): 1,
         ("j2", 1, "g1"): 0, ("j3", 0, "g0"): 1, ("j3", 1, "g1"): 0, ("j3", 2, "g2"): 0,
         ("j4", 0, "g0"): 1, ("j4", 1, "g1"): 0, ("j4", 2, "g2"): 0, ("j5", 0, "g0"): 0,
         ("j5", 1, "g2"): 1, ("j5", 2, "g3"): 0, ("j6", 0, "g0"): 0, ("j6", 1, "g2"): 1,
         ("j6", 2, "g3"): 0}
    cols = {("y", *k): v for k, v in y.items()}
    cols.update({("s", f"j{j}"): BASIC for j in range(7)})
    cols[("lam", "j0")] = BASIC
    rows = {("gpu", "g0"): 1, ("gpu", "g1"): 2, ("gpu", "g2"): 1, ("gpu", "g3"): 1}
    rows.update({("batch", f"j{j}"): LOWER for j in range(1, 7)})
    rows.update({("demand", f"j{j}"): 2 for j in range(7)})
    warm = WarmStart(rounds=[_saved(_keys(other, [0] * 7), cols, rows)],
                     levels={f"j{j}": 68.42 for j in range(7)})
    hot = solve_maxmin(cluster, warm=warm)
    assert hot.max_sd == pytest.approx(solve_maxmin(cluster).max_sd, rel=1e-5)


def test_a_zero_level_is_solved_again_from_the_cold_basis(monkeypatch, caplog):
    # Make the first level solve end at level 0 (its level column held at 0
    # for that run only), as HiGHS once did from a warm basis: the level LP
    # must go back to the cold basis and reach the cold optimum.
    cluster, run, calls = _shared_cluster(), highs.run, []

    def zero_once(h):
        if calls:
            return run(h)
        calls.append(h)
        lam = h.getNumCol() - 1  # one component: its level is the last column
        up = h.getLp().col_upper_[lam]
        h.changeColBounds(lam, 0.0, 0.0)
        pivots = run(h)
        h.changeColBounds(lam, 0.0, up)
        return pivots

    cold = solve_maxmin(cluster).max_sd
    monkeypatch.setattr(highs, "run", zero_once)
    with caplog.at_level(logging.DEBUG, logger=lp.__name__):
        hot = solve_maxmin(cluster)
    assert "returned a zero level" in caplog.text
    assert hot.max_sd == pytest.approx(cold, rel=1e-6)


def test_warm_and_cold_agree_when_one_demand_is_tiny():
    # Found by the stress: j7 has 40 samples left, so its demand is orders of
    # magnitude under the others'. With every component's level centred on
    # the geometric mean of its demands, the duals lost accuracy and the warm
    # SD search stopped 4e-5 above the cold one (547.058 vs 547.036).
    r = RankState
    before = ClusterState((
        JobState("j0", 4, (r("g1", 2, 0.0625), r("g0", 1, 0.0625), r("g2", 1, 0.0625)),
                 0.0, 100001.0),
        JobState("j1", 2, (r("g0", 1, 0.0625), r("g2", 1, 0.0625)), 0.0, 100001.0),
        JobState("j2", 2, (r("g3", 1, 0.0625), r("g1", 1, 0.0625)), 0.0, 100001.0)))
    after = ClusterState((
        JobState("j0", 258, (r("g1", 129, 0.001), r("g0", 129, 0.07062836951314477)), 0.0,
                 100001.0),
        JobState("j1", 1, (r("g0", 1, 0.0625),), 0.0, 100001.0),
        JobState("j2", 2, (r("g0", 1, 0.0625), r("g1", 1, 0.0625)), 0.0, 100001.0,
                 pinned=(1, 1)),
        JobState("j3", 88, (r("g0", 44, 0.00390625), r("g1", 44, 0.0625)), 0.0, 100001.0),
        JobState("j4", 17, (r("g1", 17, 0.099609375),), 0.0, 100001.0, 0.0, None, 5468.0),
        JobState("j5", 1, (r("g1", 1, 0.0625),), 0.0, 100001.0),
        JobState("j6", 1, (r("g0", 1, 0.0625),), 0.0, 100001.0),
        JobState("j7", 1, (r("g0", 1, 0.0625),), 99961.0, 100001.0, 0.0, None, 1.0)))
    warm = WarmStart()
    decide(before, "sd-maxmin", None, warm)
    hot = solve_maxmin(after, warm=warm)
    assert hot.max_sd == pytest.approx(solve_maxmin(after).max_sd, rel=1e-6)


@pytest.mark.parametrize("seed", [2, 6])
def test_one_period_on_a_warm_start_costs_far_less_than_a_cold_one(seed):
    # 1000 jobs of 1-8 GPUs on 2,048 GPUs one period later: progress, 2 % cost
    # noise, the 10 jobs furthest along replaced. Under the old count repair
    # these two periods' warm leftover LPs took 5,928 pivots, twice the cold
    # ones (~2,870); completed as alien bases, ~150.
    hot, cold = _warm_and_cold_one_period_on(synthetic_cluster(1000, 2048, seed=1000), 2048,
                                             seed, churn=0.01)
    assert hot < cold / 4


def test_a_warm_leftover_solve_over_its_pivot_cap_restarts_cold(monkeypatch, caplog):
    # With no pivots allowed from the last decision's basis, the leftover LP
    # must fall back to the cold start and still reach the optimum.
    monkeypatch.setattr(lp, "_WARM_PIVOTS_PER_ROW", 0.0)
    monkeypatch.setattr(lp, "_WARM_PIVOTS_MIN", 0)
    before = synthetic_cluster(40, 80, 0)
    warm = WarmStart()
    after = next_period(before, decide(before, "sd-maxmin", None, warm), 80, 0, (1, 8),
                        churn=0.05)
    excl = np.array([exclusive_rate(j) for j in after.jobs])
    with caplog.at_level(logging.DEBUG, logger="gpufair.scheduler.policy.lp"):
        hot = solve_maxmin(after, warm=warm)
    assert "starting cold" in caplog.text and warm.pivots["throughput"] > 0
    fresh = solve_maxmin(after)
    assert hot.max_sd == pytest.approx(fresh.max_sd, rel=1e-6)
    assert (hot.rates / excl).sum() == pytest.approx((fresh.rates / excl).sum(), rel=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_cold_second_round_starts_from_the_frozen_jobs_floors(monkeypatch, seed):
    # Jobs inside 8-GPU nodes: many small components, most of them with a
    # job left for round 2. From round 1's optimum as it stands, each frozen
    # job's demand row (its level coefficient now 0) must first pivot its
    # step rate out.
    cluster = synthetic_cluster(200, 400, seed, node=8)
    excl = np.array([exclusive_rate(j) for j in cluster.jobs])
    crafted = WarmStart()
    first = solve_maxmin(cluster, warm=crafted)
    monkeypatch.setattr(lp.SplitProgram, "start_round", lambda self, r, frozen, live: None)
    plain = WarmStart()
    again = solve_maxmin(cluster, warm=plain)
    assert crafted.pivots["level"] < 0.8 * plain.pivots["level"]
    # The same water-filling outcome: every job's normalised speed, in order.
    assert np.sort(first.rates / excl) == pytest.approx(np.sort(again.rates / excl), rel=1e-6)
