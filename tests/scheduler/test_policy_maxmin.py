"""sd-maxmin against brute force over every integer split, and the model."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufair.scheduler.policy import (ClusterState, JobState, PolicyConfig, RankState, decide,
                                      exclusive_rate, shared_rates, solve_maxmin)


def level(cluster: ClusterState, splits: list[tuple[int, ...]]) -> float:
    """Best min_j r_j / R_j reachable with these splits fixed: every GPU's
    time budget sum_j (a + c b) r_j / B_j <= 1 with r_j = t R_j."""
    load: dict[str, float] = {}
    for job, split in zip(cluster.jobs, splits):
        for rank, b in zip(job.ranks, split):
            load[rank.gpu] = load.get(rank.gpu, 0.0) + rank.step_time(b) * exclusive_rate(job) \
                / job.global_batch
    return min(1.0 / v for v in load.values())


def all_splits(job: JobState):
    if not job.splittable:
        yield job.split
        return
    n, big_b = len(job.ranks), job.global_batch
    for head in itertools.product(range(1, big_b), repeat=n - 1):
        last = big_b - sum(head)
        split = (*head, last)
        if last >= 1 and all(r.cap is None or b <= r.cap for r, b in zip(job.ranks, split)):
            yield split


def brute_force(cluster: ClusterState) -> float:
    return max(level(cluster, list(s))
               for s in itertools.product(*(list(all_splits(j)) for j in cluster.jobs)))


@st.composite
def small_clusters(draw) -> ClusterState:
    """Two or three jobs on three GPUs, at most two splittable (brute force stays small)."""
    jobs = []
    for j in range(draw(st.integers(2, 3))):
        n = draw(st.integers(1, 2)) if j < 2 else 1
        gpus = draw(st.permutations(["g0", "g1", "g2"]))[:n]
        big_b = draw(st.integers(max(n, 2), 40 if n > 1 else 64))
        split = (big_b // 2, big_b - big_b // 2) if n == 2 else (big_b,)
        ranks = tuple(RankState(g, b, draw(st.floats(1e-3, 5e-2)), draw(st.floats(0, 2e-2)),
                                draw(st.one_of(st.none(), st.integers(-(-big_b // n), big_b))))
                      for g, b in zip(gpus, split))
        jobs.append(JobState(f"j{j}", big_b, ranks, 0, 1e4, 0))
    return ClusterState(tuple(jobs))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=small_clusters())
def test_lp_bounds_every_integer_split_and_maxmin_reaches_it(cluster):
    best = brute_force(cluster)
    sol = solve_maxmin(cluster)
    assert sol.min_level >= best * (1 - 1e-6)
    ds = decide(cluster, "sd-maxmin", PolicyConfig(min_change=0.0))
    got = level(cluster, [ds[j.job].split for j in cluster.jobs])
    assert got <= best * (1 + 1e-9)
    # Rounding to integers costs at most a few samples' worth per rank.
    worst_b = min(j.global_batch for j in cluster.jobs if j.splittable) \
        if any(j.splittable for j in cluster.jobs) else 1
    assert got >= best * (1 - 4.0 / worst_b) - 1e-9


def test_maxmin_hits_the_brute_force_optimum_when_it_is_integral():
    # wide job on g0 (shared with a 1-GPU job) and g1 (alone): the optimum puts
    # 1/3 of its batch on g0 for these costs; B = 60 makes that integral.
    r = RankState
    cluster = ClusterState((
        JobState("wide", 60, (r("g0", 30, 0.01), r("g1", 30, 0.01)), 0, 1e4, 0),
        JobState("solo", 60, (r("g0", 60, 0.01),), 0, 1e4, 0),
    ))
    best = brute_force(cluster)
    ds = decide(cluster, "sd-maxmin", PolicyConfig(min_change=0.0))
    assert level(cluster, [ds[j.job].split for j in cluster.jobs]) == pytest.approx(best)
    assert solve_maxmin(cluster).min_level == pytest.approx(best, rel=1e-6)


def test_waterfill_spends_leftover_capacity():
    # j0 is stuck sharing g0 with j1; j2 alone on g2 should still run at full speed.
    r = RankState
    cluster = ClusterState((
        JobState("j0", 10, (r("g0", 10, 0.01),), 0, 1e4, 0),
        JobState("j1", 10, (r("g0", 10, 0.01),), 0, 1e4, 0),
        JobState("j2", 10, (r("g2", 10, 0.01),), 0, 1e4, 0),
    ))
    sol = solve_maxmin(cluster)
    norm = sol.rates / np.array([exclusive_rate(j) for j in cluster.jobs])
    assert sol.min_level == pytest.approx(0.5, rel=1e-6)
    assert norm[2] == pytest.approx(1.0, rel=1e-6)


def test_time_slicing_model_shares_and_redistributes():
    r = RankState
    alone = JobState("a", 10, (r("g0", 10, 0.01, 0.1),), 0, 1, 0)
    assert shared_rates([alone]).rates[0] == pytest.approx(10 / 0.2)
    pair = [JobState("a", 10, (r("g0", 10, 0.01),), 0, 1, 0),
            JobState("b", 10, (r("g0", 10, 0.01),), 0, 1, 0)]
    assert shared_rates(pair).rates == pytest.approx([50, 50], rel=1e-6)
    # A synchronous job held back elsewhere leaves its unused share to its neighbour.
    held = [JobState("w", 20, (r("g0", 10, 0.01), r("g1", 10, 0.04)), 0, 1, 0),
            JobState("b", 10, (r("g0", 10, 0.01),), 0, 1, 0)]
    out = shared_rates(held)
    assert out.rates[1] == pytest.approx(75, rel=1e-4)
    assert out.gpu_busy["g0"] == pytest.approx(1.0, rel=1e-6)
