"""Queue order: the slow-down target, deadline order, LAS levels, FIFO."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufair.scheduler.policy import priority
from gpufair.scheduler.policy.fleet import FleetJob
from gpufair.scheduler.policy.priority import (KEEP_UP_SD, MAKESPAN_SLACK, SLACK_TARGET,
                                               WIDE_CAP, capacity_target, deadline, keeps_up,
                                               las_level, late_for_goal, makespan_goal,
                                               priority_order, sd_target)


def job(name: str, alone_s: float, arrival: float = 0.0, gpus: int = 1, done: float = 0.0,
        attained: float = 0.0) -> FleetJob:
    """A job whose exclusive time is `alone_s` (1 sample/s)."""
    return FleetJob(name, gpus, 8 * gpus, arrival, alone_s, 1.0, 0.1, 0.0, done,
                    attained_s=attained)


def test_short_job_first_when_both_arrive_on_a_busy_gpu():
    # 1 and 10 GPU-hours on one GPU: deadline order runs the short one first, for SDs
    # 1 and 1.1, where sharing equally would give the short one SD 2.
    jobs = [job("long", 36000.0), job("short", 3600.0)]
    order, target, _, _ = priority_order(jobs, 0.0, "sd", num_gpus=1)
    assert [jobs[i].job for i in order] == ["short", "long"]
    assert target == pytest.approx(1.1, rel=1e-4)


def test_target_is_one_when_the_cluster_keeps_up_and_grows_when_it_falls_behind():
    light = [job(f"j{i}", 100.0) for i in range(4)]
    assert sd_target(light, 0.0, num_gpus=4) == pytest.approx(1.0)
    heavy = [job(f"j{i}", 100.0) for i in range(8)]
    # Eight equal jobs on four GPUs: the best max SD is 2 (half wait one job length).
    assert sd_target(heavy, 0.0, num_gpus=4) == pytest.approx(2.0, rel=1e-4)


@given(st.lists(st.tuples(st.floats(1, 1e4), st.floats(0, 1e3), st.sampled_from([1, 2, 4])),
                min_size=1, max_size=12), st.integers(1, 8))
@settings(max_examples=200, deadline=None)
def test_the_target_is_the_smallest_the_fluid_cluster_meets(specs, gpus):
    jobs = [job(f"j{i}", a, arr, min(n, gpus)) for i, (a, arr, n) in enumerate(specs)]
    now = max(j.arrival_s for j in jobs)
    target = sd_target(jobs, now, gpus)

    def meets(s: float) -> bool:
        due = sorted((j.arrival_s + s * j.alone_s() - now, j.remaining_s() * j.num_gpus,
                      j.remaining_s()) for j in jobs)
        total = 0.0
        for d, work, rem in due:
            total += work
            if rem > d * (1 + 1e-9) or total > gpus * d * (1 + 1e-9):
                return False
        return True

    assert target >= 1.0 and meets(target * (1 + 1e-5))
    assert target == pytest.approx(1.0) or not meets(target * (1 - 1e-3))


def test_wide_jobs_get_a_later_deadline_capped():
    narrow, wide = job("n", 100.0), job("w", 100.0, gpus=16)
    assert deadline(wide, 2.0, 1e9, WIDE_CAP) == pytest.approx(2.0 * WIDE_CAP * 100.0)
    assert deadline(narrow, 2.0, 1e9, WIDE_CAP) == pytest.approx(200.0)
    assert deadline(wide, 2.0, 150.0, WIDE_CAP) == 150.0  # never past the makespan goal
    assert deadline(wide, 2.0, 1e9, 1.0) == deadline(narrow, 2.0, 1e9, WIDE_CAP)
    # Half of 32 GPUs still gets the slack; more than half of them never does.
    assert deadline(wide, 2.0, 1e9, WIDE_CAP, num_gpus=32) == pytest.approx(2.0 * WIDE_CAP * 100.0)
    assert deadline(wide, 2.0, 1e9, WIDE_CAP, num_gpus=31) == pytest.approx(200.0)


def test_wide_jobs_get_their_slack_only_while_the_cluster_is_behind():
    # Five GPUs: a 4-GPU job and three 1-GPU jobs of 100 s fit within slow-down 2.
    # The wide job waited 500 s, so its least reachable slow-down is 6: that is its
    # own wait, not the cluster's capacity, so the cluster still keeps up and the
    # wide job's deadline follows the narrow jobs' rule.
    wide = job("wide", 100.0, gpus=4)
    jobs = [wide, *(job(f"n{i}", 100.0, arrival=500.0) for i in range(3))]
    assert wide.sd_alone_from(500.0) > KEEP_UP_SD
    assert keeps_up(jobs, 500.0, num_gpus=5)
    assert priority_order(jobs, 500.0, "sd", num_gpus=5).wide_cap == 1.0
    # Eight more: 1,500 GPU-s due within 200 s on 5 GPUs do not fit.
    busy = jobs + [job(f"m{i}", 100.0, arrival=500.0) for i in range(8)]
    assert not keeps_up(busy, 500.0, num_gpus=5)
    assert priority_order(busy, 500.0, "sd", num_gpus=5).wide_cap == WIDE_CAP


def test_a_wide_job_goes_by_the_narrow_jobs_rule_while_the_cluster_keeps_up(monkeypatch):
    # Both arrive at once on eight GPUs (target 1): the 4-GPU job is due at 100 s,
    # the 1-GPU one at 120 s, so the wide job goes first; with its slack (the
    # cluster behind) it would be due at 150 s and go second.
    jobs = [job("narrow", 120.0), job("wide", 100.0, gpus=4)]
    assert priority_order(jobs, 0.0, "sd", num_gpus=8).order == [1, 0]
    monkeypatch.setattr(priority, "keeps_up", lambda *_: False)
    assert priority_order(jobs, 0.0, "sd", num_gpus=8).order == [0, 1]
    # On five GPUs nothing as wide runs beside it: no slack, so it still goes first.
    assert priority_order(jobs, 0.0, "sd", num_gpus=5).order == [1, 0]


def test_makespan_goal_is_the_longest_jobs_own_finish_or_above_the_packed_work():
    # b alone from its arrival ends at 1050 s; the work left (1,140 GPU-s) packed onto
    # 2 GPUs from now ends at 630 s, onto 1 GPU at 1200 s. The longest job gets no
    # slack; the packed work's slack is on the work left, so a cluster whose oldest
    # job arrived long ago gets no more of it.
    jobs = [job("a", 100.0), job("b", 1000.0, arrival=50.0), job("c", 10.0, gpus=4)]
    assert makespan_goal(jobs, now=60.0, num_gpus=2) == pytest.approx(1050.0)
    assert makespan_goal(jobs, now=60.0, num_gpus=1) == pytest.approx(
        60.0 + (1 + MAKESPAN_SLACK) * 1140.0)
    aged = [replace(j, arrival_s=j.arrival_s - 1e5) for j in jobs]  # a day older, as much left
    assert makespan_goal(aged, now=60.0, num_gpus=1) == makespan_goal(jobs, now=60.0, num_gpus=1)


def test_the_capacity_target_counts_the_gpus_not_a_jobs_own_wait():
    # A 10 s job that waited 60 s on an idle GPU: its least reachable slow-down is 7,
    # so the slow-down target is 7, but the GPU could do all the work at once.
    jobs = [job("short", 10.0), job("long", 1000.0)]
    assert sd_target(jobs, 60.0, num_gpus=2) == pytest.approx(7.0)
    assert capacity_target(jobs, 60.0, num_gpus=2) == 1.0
    # Eight equal jobs on four GPUs: capacity alone forces slow-down 2.
    heavy = [job(f"j{i}", 100.0) for i in range(8)]
    assert capacity_target(heavy, 0.0, num_gpus=4) == pytest.approx(2.0, rel=1e-4)


def test_the_goals_slack_shrinks_once_the_capacity_target_passes_its_mark():
    jobs = [job("a", 100.0), job("b", 1000.0, arrival=50.0), job("c", 10.0, gpus=4)]
    full = makespan_goal(jobs, now=60.0, num_gpus=1, capacity=SLACK_TARGET)
    assert full == makespan_goal(jobs, now=60.0, num_gpus=1)
    half = makespan_goal(jobs, now=60.0, num_gpus=1, capacity=2 * SLACK_TARGET)
    assert half == pytest.approx(60.0 + (1 + MAKESPAN_SLACK / 2) * 1140.0)


def test_a_job_is_late_for_the_goal_once_its_latest_start_has_come_if_its_length_is_known():
    long = job("long", 1000.0, done=100.0)  # 900 s left
    assert not late_for_goal(long, now=99.0, goal=1000.0)
    assert late_for_goal(long, now=100.0, goal=1000.0)
    stand_in = FleetJob("unknown", 1, 8, 0.0, 1000.0, 1.0, 0.1, length_known=False)
    assert not late_for_goal(stand_in, now=900.0, goal=1000.0)


def test_jobs_due_at_the_makespan_goal_go_longest_first():
    # Twenty short jobs make the slow-down target large (~10) on two GPUs, so the two
    # long jobs' slow-down deadlines lie past the makespan goal: both are due then,
    # and the longer goes first, or it would run alone at the end.
    jobs = [job(f"s{i:02d}", 100.0) for i in range(20)] + [job("mid", 900.0),
                                                          job("long", 1000.0)]
    order, target, goal, cap = priority_order(jobs, 0.0, "sd", num_gpus=2)
    names = [jobs[i].job for i in order]
    assert target > 5 and names[-2:] == ["long", "mid"]
    assert deadline(jobs[-1], target, goal, cap) == goal == deadline(jobs[-2], target, goal, cap)


def test_jobs_that_need_every_gpu_go_first_among_those_due_at_the_goal_by_their_own_deadlines():
    # As above, but the two long jobs need both GPUs and a third such job is
    # shorter: none overlaps with another, so longest first cannot shorten the
    # makespan. They go by their own slow-down deadlines (the shortest first),
    # ahead of a 1-GPU job also due at the goal, which keeps its place.
    jobs = [job(f"s{i:02d}", 100.0) for i in range(20)] + [
        job("mid", 900.0, gpus=2), job("long", 1000.0, gpus=2), job("short", 600.0, gpus=2),
        job("narrow", 1500.0)]
    order, target, goal, cap = priority_order(jobs, 0.0, "sd", num_gpus=2)
    names = [jobs[i].job for i in order]
    assert all(deadline(j, target, goal, cap) == goal for j in jobs[-4:])
    assert names[-4:] == ["short", "mid", "long", "narrow"]
    # On a larger cluster they can overlap: longest first again.
    order = priority_order(jobs, 0.0, "sd", num_gpus=3).order
    assert [jobs[i].job for i in order][-4:] == ["narrow", "long", "mid", "short"]


def test_fifo_and_las_orders():
    jobs = [job("late", 10.0, arrival=5.0), job("early", 10.0, arrival=1.0, attained=7200.0),
            job("fresh", 10.0, arrival=3.0, attained=100.0)]
    fifo = priority_order(jobs, 10.0, "fifo", 4).order
    assert [jobs[i].job for i in fifo] == ["early", "fresh", "late"]
    las = priority_order(jobs, 10.0, "las", 4).order
    # Level 0 (under an hour of service) first, arrival order within it.
    assert [jobs[i].job for i in las] == ["fresh", "late", "early"]
    assert [las_level(s) for s in (0, 3599, 3600, 35_999, 36_000)] == [0, 0, 1, 1, 2]
