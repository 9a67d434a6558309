"""The tail plan: list schedules of the last waiting jobs, and how a round follows one."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufair.scheduler.policy import tail
from gpufair.scheduler.policy.admission import plan_round
from gpufair.scheduler.policy.fleet import PRESETS, Gpu
from gpufair.scheduler.policy.tail import MAX_JOBS, list_schedule, plan_tail

from test_round import make_job


def _drawn_tail(jobs, empty):
    """Drawn (width, seconds) jobs, the k-th arrived 10 k s ago, and GPU empty
    times: the fleet, and the arrays `list_schedule` takes (alone = seconds)."""
    fleet = [make_job(f"j{k}", w, -10.0 * k, 100.0 * w * r) for k, (w, r) in enumerate(jobs)]
    widths = np.array([w for w, _ in jobs])
    rems = np.array([float(r) for _, r in jobs])
    ages = np.array([10.0 * k for k in range(len(jobs))])
    return fleet, np.array(empty, dtype=float), widths, rems, ages


def _arrays(widths, rems):
    n = len(widths)
    return np.array(widths), np.array(rems, dtype=float), np.zeros(n), np.array(rems, dtype=float)


def test_a_list_schedule_gives_each_job_the_gpus_that_empty_first():
    # Four GPUs, two empty now and two in 10 s; two 2-GPU jobs of 5 s: the first
    # runs 0-5 on g0-g1, the second there too from 5 s (not 10 s on g2-g3).
    widths, rems, ages, alones = _arrays([2, 2], [5.0, 5.0])
    plan = list_schedule(np.array([0.0, 0.0, 10.0, 10.0]), widths, rems, ages, alones, [0, 1])
    assert plan.makespan == 10.0 and plan.finishes == 15.0
    assert list(plan.starts) == [0.0, 5.0]
    assert [list(g) for g in plan.gpus] == [[0, 1], [0, 1]]
    assert list(plan.sd) == [1.0, 2.0]


def test_narrow_jobs_run_side_by_side_before_a_wide_one_rather_than_around_it():
    # Round order: a 2-GPU job, a 4-GPU one, another 2-GPU one, 1,000 s each, on
    # four empty GPUs. In that order the wide job waits for the first and the
    # second narrow one for it: 3,000 s. Both narrow ones first: 2,000 s.
    jobs = [make_job("a", 2, 0.0, 2e5), make_job("b", 4, 0.0, 4e5), make_job("c", 2, 0.0, 2e5)]
    plan = plan_tail(jobs, np.zeros(4), 5_000.0, bound=1.0)
    assert plan.makespan == pytest.approx(1000.0 * 2)
    assert list(plan.starts) == [0.0, 1000.0, 0.0]
    assert set(plan.gpus[0]) | set(plan.gpus[2]) == {0, 1, 2, 3}


@pytest.mark.parametrize("bound, makespan", [(1.0, 40.0), (3.0, 30.0)])
def test_a_plan_raises_no_slowdown_past_the_rounds_own_order_unless_under_the_bound(
        bound, makespan):
    # Two empty GPUs; in the round's order a 1-GPU job of 10 s, a 2-GPU one of
    # 10 s and a 1-GPU one of 20 s, all just arrived: 40 s, slow-downs 1, 2, 2.
    # Every 30 s plan ends one of the first two later (slow-down 3 or 2 where
    # the round's order gives it 2 or 1): taken only where the bound allows it.
    widths, rems, ages, alones = _arrays([1, 2, 1], [10.0, 10.0, 20.0])
    own = list_schedule(np.zeros(2), widths, rems, ages, alones, [0, 1, 2])
    assert own.makespan == 40.0 and list(own.sd) == [1.0, 2.0, 2.0]
    jobs = [replace(make_job(n, w, 0.0, 1.0), samples_total=r * 100.0 * w)
            for n, w, r in zip("abc", widths, rems)]
    plan = plan_tail(jobs, np.zeros(2), 0.0, bound)
    assert plan.makespan == pytest.approx(makespan)
    assert np.all(plan.sd <= np.maximum(own.sd, bound) + 1e-9)


def test_the_plan_finds_an_order_that_no_single_move_reaches(monkeypatch):
    # GPUs empty at 20, 30, 30, 30 s; in the round's order a 2-GPU job of 30 s,
    # a 2-GPU one of 50 s and a 1-GPU one of 40 s: 100 s, as every order the
    # heuristics try, and no single move of one job shortens it. The 1-GPU job
    # first, then the 50 s one, then the 30 s one: 90 s.
    jobs = [replace(make_job(n, w, 0.0, 1.0), samples_total=r * 100.0 * w)
            for n, w, r in (("a", 2, 30.0), ("b", 2, 50.0), ("c", 1, 40.0))]
    empty = np.array([20.0, 30.0, 30.0, 30.0])
    plan = plan_tail(jobs, empty, 0.0, bound=10.0)
    assert plan.makespan == pytest.approx(90.0)
    assert list(plan.starts) == [60.0, 30.0, 20.0]
    monkeypatch.setattr(tail, "SEARCH_CELLS", 0)  # no exact search: the orders and moves alone
    assert plan_tail(jobs, empty, 0.0, bound=10.0).makespan == pytest.approx(100.0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.integers(1, 50)), min_size=2, max_size=6),
       st.lists(st.integers(0, 40), min_size=4, max_size=4), st.floats(1.0, 30.0))
def test_the_plan_is_the_best_order_within_the_slowdown_limits(jobs, empty, bound):
    # Brute force over every order of up to six jobs: the plan's makespan is
    # the least any order reaches without passing a job's slow-down limit.
    fleet, empty_at, widths, rems, ages = _drawn_tail(jobs, empty)
    own = list_schedule(empty_at, widths, rems, ages, rems, range(len(jobs)))
    limit = np.maximum(own.sd, bound) * (1 + 1e-9)
    best = min(s.makespan for s in (list_schedule(empty_at, widths, rems, ages, rems, order)
                                    for order in itertools.permutations(range(len(jobs))))
               if np.all(s.sd <= limit))
    assert plan_tail(fleet, empty_at, 0.0, bound).makespan == pytest.approx(best)


def test_the_tail_is_not_planned_for_one_job_unknown_lengths_pinned_gpus_or_many_jobs():
    two = [make_job("a", 1, 0.0, 1e5), make_job("b", 2, 0.0, 1e5)]
    empty = np.zeros(4)
    assert plan_tail(two, empty, 0.0, 1.0) is not None
    assert plan_tail(two[:1], empty, 0.0, 1.0) is None
    assert plan_tail([two[0], replace(two[1], length_known=False)], empty, 0.0, 1.0) is None
    assert plan_tail([two[0], replace(two[1], gpus_allowed=frozenset({"g0", "g1"}))],
                     empty, 0.0, 1.0) is None
    assert plan_tail([make_job("w", 8, 0.0, 1e5), two[0]], empty, 0.0, 1.0) is None
    many = [make_job(f"j{k}", 1, 0.0, 1e5) for k in range(MAX_JOBS + 1)]
    assert plan_tail(many, empty, 0.0, 1.0) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.integers(1, 50)), min_size=2, max_size=7),
       st.lists(st.integers(0, 40), min_size=4, max_size=4), st.floats(1.0, 30.0))
def test_every_plan_is_a_valid_schedule_no_longer_than_the_rounds_order(jobs, empty, bound):
    fleet, empty_at, widths, rems, ages = _drawn_tail(jobs, empty)
    plan = plan_tail(fleet, empty_at, 0.0, bound)
    own = list_schedule(empty_at, widths, rems, ages, rems, range(len(jobs)))
    assert plan.makespan <= own.makespan + 1e-9
    assert np.all(plan.sd <= np.maximum(own.sd, bound) * (1 + 1e-9))
    # Gangs whole, on GPUs empty by their start, never two jobs on a GPU at once.
    busy = {g: [(0.0, float(e))] for g, e in enumerate(empty_at)}
    for k, gpus in enumerate(plan.gpus):
        assert len(set(gpus)) == widths[k]
        for g in gpus:
            busy[int(g)].append((plan.starts[k], plan.starts[k] + rems[k]))
    for spans in busy.values():
        spans.sort()
        assert all(b[0] >= a[1] - 1e-9 for a, b in zip(spans, spans[1:]))


def test_a_round_whose_waiting_jobs_are_all_due_at_the_goal_follows_the_tail_plan(monkeypatch):
    # Four empty GPUs and a fifth held 100 s more by a job that has waited all
    # along (its least reachable slow-down, about 1,000, sets the round's target,
    # so every waiting job is due at the makespan goal). Waiting: a 4-GPU job of
    # 2,100 s and two 2-GPU ones of 2,000 s. The round's order, longest first,
    # starts the 4-GPU job; either way the last ends at 4,100 s, but the narrow
    # pair first ends two jobs at 2,000 s, not one at 2,100 s.
    gpus = [Gpu(f"g{i}") for i in range(5)]
    old = make_job("old", 1, 0.0, 1e4, on=["g4"])
    wide = make_job("wide", 4, 0.0, 8.4e5)
    narrow = [make_job(f"narrow{k}", 2, 0.0, 4e5) for k in range(2)]
    plan = plan_round([old, wide, *narrow], gpus, 1e5, PRESETS["gpufair"])
    assert sorted(plan.admitted.values()) == [("g0", "g1"), ("g2", "g3")]
    (entry,) = plan.queue
    assert entry.job == "wide" and entry.predicted_start_s == pytest.approx(2000.0)
    assert entry.reason.startswith("every waiting job is due at the makespan goal")
    # Without the tail plan the round starts the wide job and queues the others.
    monkeypatch.setattr(tail, "MAX_JOBS", 0)
    plan = plan_round([old, wide, *narrow], gpus, 1e5, PRESETS["gpufair"])
    assert list(plan.admitted) == ["wide"]
