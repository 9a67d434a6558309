"""Every policy keeps the rules of a split, on random clusters."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufair.common.errors import InvalidArgument
from gpufair.scheduler.policy import (ClusterState, JobState, PolicyConfig, RankState, decide,
                                      moved_fraction, policy_names, round_split)

from sched_strategies import clusters

POLICIES = policy_names()
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("policy", POLICIES)
@FAST
@given(cluster=clusters(), min_change=st.sampled_from([0.0, 0.05, 0.3]))
def test_every_decision_is_a_valid_split(policy, cluster, min_change):
    decisions = decide(cluster, policy, PolicyConfig(min_change=min_change))
    assert set(decisions) == {j.job for j in cluster.jobs}
    for job in cluster.jobs:
        d = decisions[job.job]
        assert len(d.split) == len(job.ranks)
        assert all(isinstance(b, int) and b >= 1 for b in d.split)
        assert sum(d.split) == job.global_batch
        assert all(r.cap is None or b <= r.cap for r, b in zip(job.ranks, d.split))
        assert d.explanation
        if job.pinned is not None:
            assert d.split == job.pinned
        elif len(job.ranks) == 1:
            assert not d.changed and d.split == job.split
        elif d.changed:
            assert moved_fraction(job.split, d.split) >= min_change
        else:
            assert d.split == job.split


@pytest.mark.parametrize("policy", POLICIES)
@FAST
@given(cluster=clusters(pins=False))
def test_nothing_moves_below_the_threshold(policy, cluster):
    decisions = decide(cluster, policy, PolicyConfig(min_change=0.999))
    for job in cluster.jobs:
        assert decisions[job.job].split == job.split
        assert not decisions[job.job].changed


def _contended() -> ClusterState:
    r = RankState
    return ClusterState((
        JobState("wide", 64, (r("g0", 32, 0.01, 0.01), r("g1", 32, 0.01, 0.01)), 0, 1e5, 0),
        JobState("n0", 32, (r("g0", 32, 0.01, 0.01),), 0, 1e5, 0),
        JobState("n1", 32, (r("g0", 32, 0.01, 0.01),), 0, 1e5, 0),
    ))


@pytest.mark.parametrize("policy", ["balance", "sd-feedback", "sd-maxmin"])
def test_load_moves_off_the_contended_gpu(policy):
    d = decide(_contended(), policy, PolicyConfig(min_change=0.0))["wide"]
    assert d.changed
    assert d.split[0] < d.split[1]
    assert "g0" in d.explanation


def test_even_restores_the_default_split():
    cluster = _contended()
    skewed = JobState("wide", 64, (RankState("g0", 10, 0.01), RankState("g1", 54, 0.01)), 0, 1, 0)
    d = decide(ClusterState((skewed, *cluster.jobs[1:])), "even")["wide"]
    assert d.split == (32, 32) and d.changed


@pytest.mark.parametrize("bad,needle", [
    (JobState("x", 1, (RankState("g0", 1, 0.1), RankState("g1", 0, 0.1)), 0, 1, 0), "x"),
    (JobState("x", 10, (RankState("g0", 5, 0.1), RankState("g0", 5, 0.1)), 0, 1, 0), "two ranks"),
    (JobState("x", 10, (RankState("g0", 5, 0.1), RankState("g1", 6, 0.1)), 0, 1, 0), "sum"),
    (JobState("x", 10, (RankState("g0", 5, 0.1, cap=4), RankState("g1", 5, 0.1, cap=4)), 0, 1, 0),
     "caps"),
    (JobState("x", 10, (RankState("g0", 5, -1.0), RankState("g1", 5, 0.1)), 0, 1, 0),
     "sec_per_sample"),
])
def test_bad_job_state_is_invalid_argument(bad, needle):
    with pytest.raises(InvalidArgument, match=needle):
        decide(ClusterState((bad,)), "sd-maxmin")


def test_unknown_policy_names_the_choices():
    with pytest.raises(InvalidArgument, match="sd-maxmin"):
        decide(ClusterState(()), "fastest")


@FAST
@given(weights=st.lists(st.floats(0, 100), min_size=1, max_size=8), extra=st.integers(0, 500),
       data=st.data())
def test_round_split_keeps_sum_bounds_and_caps(weights, extra, data):
    total = len(weights) + extra
    caps = [data.draw(st.one_of(st.none(), st.integers(-(-total // len(weights)), total)))
            for _ in weights]
    split = round_split(weights, total, caps)
    assert sum(split) == total
    assert all(1 <= b <= (c or total) for b, c in zip(split, caps))
