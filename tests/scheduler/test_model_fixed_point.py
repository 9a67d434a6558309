"""The time-slicing model's steady state: the conditions it must meet, closed
forms, and agreement with the old share iteration where that one converged."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufair.scheduler.policy import JobState, RankState, model, shared_rates
from sched_strategies import clusters

REL = 1e-9


def _arrays(jobs):
    names: dict[str, int] = {}
    ji, gi, w = [], [], []
    for j, job in enumerate(jobs):
        for r in job.ranks:
            ji.append(j)
            gi.append(names.setdefault(r.gpu, len(names)))
            w.append(r.step_time())
    return np.array(ji), np.array(gi), np.array(w), names


def _could_get_slow(u: np.ndarray, gi: np.ndarray) -> np.ndarray:
    """Rank by rank: the max-min level of its GPU with its own demand unbounded."""
    out = np.empty(len(u))
    for r in range(len(u)):
        others = np.sort(u[(gi == gi[r]) & (np.arange(len(u)) != r)])
        lo, hi = 0.0, 1.0
        for _ in range(64):  # bisection on sum(min(others, c)) + c = 1
            c = (lo + hi) / 2
            lo, hi = (c, hi) if np.minimum(others, c).sum() + c < 1 else (lo, c)
        out[r] = lo
    return out


def assert_steady_state(jobs):
    """Capacity, a bottleneck per job, and no other rank limiting its job."""
    sr = shared_rates(jobs)
    ji, gi, w, names = _arrays(jobs)
    x = sr.rates / np.array([j.global_batch for j in jobs], dtype=float)
    u = w * x[ji]
    load = np.bincount(gi, weights=u)
    assert load.max() <= 1 + REL
    for g, i in names.items():
        assert sr.gpu_busy[g] == pytest.approx(load[i], rel=REL, abs=1e-12)
    top = np.zeros(len(names))
    np.maximum.at(top, gi, u)
    elastic = (load[gi] >= 1 - REL) & (u >= top[gi] * (1 - REL))
    share = np.concatenate(sr.shares)
    limiting = share / w <= x[ji] * (1 + REL)
    for j in range(len(jobs)):
        mine = ji == j
        assert elastic[mine].any(), f"job {j} has no bottleneck on a full GPU"
        # Its speed is what its tightest rank could get, and only bottlenecks are tight.
        assert x[j] == pytest.approx(np.min(share[mine] / w[mine]), rel=REL)
        assert np.all(elastic[mine & limiting])
    np.testing.assert_allclose(share, np.minimum(_could_get_slow(u, gi), 1.0),
                               rtol=1e-9, atol=1e-12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(max_gpus=6, max_jobs=8, pins=False))
def test_random_clusters_reach_the_steady_state(cluster):
    assert_steady_state(cluster.jobs)


@st.composite
def tied_clusters(draw):
    """Crowded GPUs, costs from a tiny set (ties everywhere), many 1-rank jobs."""
    n_gpu = draw(st.integers(1, 4))
    jobs = []
    for j in range(draw(st.integers(1, 10))):
        gpus = draw(st.lists(st.integers(0, n_gpu - 1), min_size=1, max_size=n_gpu, unique=True))
        ranks = tuple(RankState(f"g{g}", draw(st.sampled_from([1, 2, 4])),
                                draw(st.sampled_from([0.01, 0.02])),
                                draw(st.sampled_from([0.0, 0.01]))) for g in gpus)
        jobs.append(JobState(f"j{j}", sum(r.batch for r in ranks), ranks))
    return jobs


@settings(max_examples=300, deadline=None)
@given(tied_clusters())
def test_ties_and_crowded_gpus_reach_the_steady_state(jobs):
    assert_steady_state(jobs)


def _job(name, *ranks):
    """ranks: (gpu, GPU-seconds per step), one sample each."""
    return JobState(name, len(ranks), tuple(RankState(g, 1, s) for g, s in ranks))


def test_two_single_rank_jobs_halve_one_gpu():
    out = shared_rates([_job("a", ("g0", 0.2)), _job("b", ("g0", 0.5))])
    assert out.rates == pytest.approx([1 / 0.4, 1 / 1.0], rel=REL)
    assert np.concatenate(out.shares) == pytest.approx([0.5, 0.5], rel=REL)


@pytest.mark.parametrize("light", [0.05, 0.1, 0.25, 0.4, 0.5, 0.6, 0.9])
def test_two_rank_job_next_to_a_one_rank_job(light):
    # j: light on g0 (shared with a), 1 s on g1 (its own). While light <= 1/2
    # j runs at its own GPU's full speed and a gets the rest of g0; above,
    # both are held on g0 at half each and g1 idles part of the time.
    out = shared_rates([_job("j", ("g0", light), ("g1", 1.0)), _job("a", ("g0", 1.0))])
    if light <= 0.5:
        expect, busy1 = [1.0, 1 - light], 1.0
    else:
        expect, busy1 = [1 / (2 * light), 0.5], 1 / (2 * light)
    assert out.rates / np.array([2, 1]) == pytest.approx(expect, rel=REL)
    assert out.gpu_busy == pytest.approx({"g0": 1.0, "g1": busy1}, rel=REL)


def test_progressive_filling_would_overshoot():
    # Filling both GPUs' levels together fills g0 first (at 0.8 each for a
    # and j), but j then speeds up on its own GPU and takes more of g0:
    # the steady state gives a 0.75, not the 0.8 an early freeze would keep.
    out = shared_rates([_job("j", ("g0", 0.25), ("g1", 1.0)), _job("a", ("g0", 1.0))])
    assert out.rates[1] == pytest.approx(0.75, rel=REL)


def test_chain_of_jobs_couples_every_gpu():
    # j_i is heavy (1 s) on g_i and light (eps) on g_{i-1}; a 1-rank job s_i
    # shares each g_i. On g_i: j_i and s_i split what j_{i+1}'s light rank
    # leaves, so x_n = 1/2 and x_i = (1 - eps x_{i+1}) / 2, down the chain.
    n, eps = 6, 0.3
    jobs = [_job("s0", ("g0", 1.0))]
    for i in range(1, n + 1):
        jobs += [_job(f"j{i}", (f"g{i - 1}", eps), (f"g{i}", 1.0)), _job(f"s{i}", (f"g{i}", 1.0))]
    x = [0.0] * (n + 2)
    for i in range(n, 0, -1):
        x[i] = (1 - eps * x[i + 1]) / 2
    out = shared_rates(jobs)
    assert out.rates[1::2] / 2 == pytest.approx(x[1:n + 1], rel=REL)
    assert out.rates[2::2] == pytest.approx(x[1:n + 1], rel=REL)
    assert out.rates[0] == pytest.approx(1 - eps * x[1], rel=REL)
    assert_steady_state(jobs)


def test_identical_jobs_tied_between_two_gpus_split_evenly():
    # Each job is a bottleneck on both GPUs; the ranks list the GPUs in
    # opposite orders, so a naive choice of bottleneck gives a singular system.
    a = _job("a", ("g0", 0.1), ("g1", 0.1))
    b = _job("b", ("g1", 0.1), ("g0", 0.1))
    assert shared_rates([a, b]).rates == pytest.approx([2 * 5.0, 2 * 5.0], rel=REL)


# Cut down from a simulator snapshot: here an undamped best response on job
# speeds cycles for ever instead of settling.
SEE_SAW = [[("g10", 0.446)], [("g11", 1.3771), ("g20", 1.3731)],
           [("g10", 1.0337), ("g11", 1.0351), ("g13", 1.0351), ("g20", 1.0351)],
           [("g11", 1.3771), ("g13", 1.3731)], [("g10", 1.0337), ("g20", 1.0351)],
           [("g10", 1.3752), ("g11", 1.3731), ("g13", 1.3731)], [("g13", 1.3771), ("g20", 1.3731)]]


def test_cluster_where_undamped_best_response_cycles():
    assert_steady_state([_job(f"j{i}", *ranks) for i, ranks in enumerate(SEE_SAW)])


def test_undamped_start_still_ends_exact(monkeypatch):
    # The step halves after `_PATIENCE` fruitless steps, which breaks the cycle.
    monkeypatch.setattr(model, "_THETA", 1.0)
    assert_steady_state([_job(f"j{i}", *ranks) for i, ranks in enumerate(SEE_SAW)])


def test_rank_without_work_never_limits():
    idle = JobState("i", 4, (RankState("g0", 4, 0.1), RankState("g1", 0, 0.1)))
    out = shared_rates([idle, _job("b", ("g1", 0.2))])
    assert out.rates == pytest.approx([4 / 0.4, 1 / 0.2], rel=REL)
    assert shared_rates([]).rates.size == 0


def _old_share_iteration(jobs, passes=2000):
    """The previous model (damped share iteration): speeds per job, or None
    when it did not settle (it often cycles)."""
    ji, gi, w, names = _arrays(jobs)
    n_job, n_gpu = len(jobs), len(names)

    def waterfill(demand):
        d_all = np.minimum(demand, 2.0)
        order = np.lexsort((d_all, gi))
        d, g = d_all[order], gi[order]
        count = np.bincount(g, minlength=n_gpu)
        start = np.concatenate(([0], np.cumsum(count)[:-1]))
        pos = np.arange(len(d)) - start[g]
        before = np.cumsum(d) - d
        before -= before[start[g]]
        hit = before + (count[g] - pos) * d >= 1.0
        first = np.full(n_gpu, len(d))
        np.minimum.at(first, g[hit], np.nonzero(hit)[0])
        level = np.full(n_gpu, np.inf)
        has = first < len(d)
        level[has] = (1.0 - before[first[has]]) / (count[has] - pos[first[has]])
        return np.minimum(demand, level[gi])

    share = 1.0 / np.bincount(gi, minlength=n_gpu)[gi]
    for _ in range(passes):
        step = np.zeros(n_job)
        np.maximum.at(step, ji, w / share)
        elastic = w / share >= step[ji] * (1 - 1e-9)
        new = waterfill(np.where(elastic, np.inf, w / step[ji]))
        if np.allclose(new, share, rtol=1e-7, atol=1e-12):  # its own test
            step = np.zeros(n_job)
            np.maximum.at(step, ji, w / new)
            return 1 / step
        share = 0.5 * (share + new)
    return None


def test_old_results_kept_where_the_old_iteration_settled():
    rng = random.Random(11)
    settled = 0
    for _ in range(100):
        n_gpu = rng.randint(2, 6)
        jobs = []
        for j in range(rng.randint(1, 8)):
            gpus = rng.sample(range(n_gpu), rng.randint(1, min(3, n_gpu)))
            jobs.append(JobState(f"j{j}", len(gpus), tuple(
                RankState(f"g{g}", 1, rng.uniform(0.01, 0.1), rng.uniform(0, 0.05)) for g in gpus)))
        old = _old_share_iteration(jobs)
        if old is None:
            continue
        settled += 1
        new = shared_rates(jobs).rates / np.array([j.global_batch for j in jobs])
        np.testing.assert_allclose(new, old, rtol=1e-6)
    assert settled >= 30  # the comparison is not vacuous (58 of 100 settle)
