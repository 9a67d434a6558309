"""One scheduling round (`plan_round`): the invariants every plan keeps,
placement against brute force, queue order, reservations, claims for the
makespan goal, lending, and arrivals between rounds. The stacking and
covering rules a newcomer meets (`arrival.py`): test_arrival_rules.py."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufair.common.errors import InvalidArgument
from gpufair.scheduler.policy.admission import plan_round
from gpufair.scheduler.policy.arrival import place_arrival
from gpufair.scheduler.policy.board import Board
from gpufair.scheduler.policy.fleet import PRESETS, Gpu, Levers, NoInterference
from gpufair.scheduler.policy.placement import choose
from gpufair.scheduler.policy.priority import MAKESPAN_SLACK, late_for_goal

from sched_strategies import Models, make_job


@st.composite
def fleets(draw):
    n_gpu = draw(st.integers(2, 10))
    gpus = [Gpu(f"g{i}", f"n{i // 4}") for i in range(n_gpu)]
    cap = draw(st.integers(1, 3))
    load = [0] * n_gpu
    jobs = []
    for i in range(draw(st.integers(1, 12))):
        width = draw(st.integers(1, min(3, n_gpu)))
        total = draw(st.floats(1e3, 1e6))
        model = draw(st.sampled_from(["m", "x", "y"]))
        resident = draw(st.booleans())
        on = []
        if resident:
            room = [g for g in range(n_gpu) if load[g] < cap and all(
                Models().compatible(model, j.model) for j in jobs if f"g{g}" in j.gpus)]
            if len(room) >= width:
                on = draw(st.permutations(room))[:width]
                for g in on:
                    load[g] += 1
        jobs.append(make_job(f"j{i}", width, draw(st.floats(0, 500)), total,
                             done=draw(st.floats(0, 0.9)) * total if on else 0.0,
                             on=[f"g{g}" for g in on], model=model))
    return jobs, gpus, cap


LEVER_SETS = {**PRESETS, "las": Levers("las", "least-loaded", "paced", "even"),
              "fifo-packed": Levers("fifo", "packed", "time-slicing", "even"),
              "fifo-strict": Levers("fifo-strict", "least-loaded", "paced", "even"),
              "sd-sliced": Levers("sd", "sd", "time-slicing", "sd-maxmin"),
              "random-paced": Levers("fifo", "random", "paced", "balance")}


@given(fleets(), st.sampled_from(sorted(LEVER_SETS)))
@settings(max_examples=300, deadline=None)
def test_every_plan_keeps_the_rules(fleet, lever_set):
    jobs, gpus, cap = fleet
    base = LEVER_SETS[lever_set]
    levers = Levers(base.queue, base.placement, base.shares, base.split, max_per_gpu=cap)
    plan = plan_round(jobs, gpus, 600.0, levers, Models(), seed=3)
    by_name = {j.job: j for j in jobs}
    where = {j.job: j.gpus for j in jobs if j.gpus} | dict(plan.admitted)
    # Admitted jobs were waiting, get exactly their GPU count, and no GPU passes the cap
    # or holds a pair that cannot co-run.
    for name, placed in plan.admitted.items():
        assert by_name[name].waiting and len(set(placed)) == by_name[name].num_gpus
    for gpu in gpus:
        there = [by_name[n].model for n, gs in where.items() if gpu.name in gs]
        assert len(there) <= cap
        assert not {"x", "y"} <= set(there)
    # Every waiting job is either admitted or queued, once, positions 1..n.
    queued = [q.job for q in plan.queue]
    waiting = {j.job for j in jobs if j.waiting}
    assert set(queued) | set(plan.admitted) == waiting and not set(queued) & set(plan.admitted)
    assert [q.position for q in plan.queue] == list(range(1, len(queued) + 1))
    assert all(q.reason and q.predicted_start_s >= 0 for q in plan.queue)
    # Every admitted job says who it joined, and starts no faster than alone.
    assert set(plan.placed) == set(plan.admitted)
    for name, note in plan.placed.items():
        assert set(note.neighbours) == {n for n, gs in where.items() if n != name and set(gs) & set(where[name])}
        assert note.predicted_sd >= 1 - 1e-9 and note.how
    if levers.shares == "paced":
        used = {g.name: 0.0 for g in gpus}
        for name, shares in plan.shares.items():
            assert len(shares) == len(where[name]) and min(shares) >= 0
            job = by_name[name]
            if min(shares) == 1.0:  # unpaced, at its exclusive speed: it uses its busy time
                steps = job.exclusive_rate / job.global_batch
                shares = [steps * (job.sec_per_step + job.sec_per_sample * b) for b in plan.splits[name]]
            for g, s in zip(where[name], shares):
                used[g] += s
        assert max(used.values()) <= 1 + 1e-9
        assert set(plan.shares) == set(where)
        for name, split in plan.splits.items():
            job = by_name[name]
            assert sum(split) == job.global_batch and min(split) >= 1
            assert max(split) <= job.rank_cap
        # The most urgent resident job runs.
        first = next(by_name[n] for n in sorted(plan.priority, key=plan.priority.get)
                     if n in where)
        assert min(plan.shares[first.job]) > 0
    else:
        assert not plan.shares


@given(st.lists(st.integers(0, 20).map(lambda k: k / 2), min_size=2, max_size=9),
       st.integers(1, 4),
       st.lists(st.integers(0, 3), min_size=9, max_size=9))
@settings(max_examples=300, deadline=None)
def test_sd_placement_matches_brute_force(scores, need, counts):
    """The `sd` rule minimises the largest score over the chosen GPUs, then the
    total job count, exactly as an exhaustive search over every set does."""
    n = len(scores)
    need = min(need, n)
    score = np.array(scores)
    count = np.array(counts[:n])
    got = choose("sd", need, np.arange(n), count, np.random.default_rng(0), score)
    best = min(itertools.combinations(range(n), need),
               key=lambda s: (max(score[list(s)]), sum(count[list(s)])))
    assert max(score[list(got)]) == pytest.approx(max(score[list(best)]))
    assert sum(count[list(got)]) == sum(count[list(best)])


def test_a_short_urgent_job_slips_in_and_a_long_one_waits_for_free_gpus():
    gpus = [Gpu("g0"), Gpu("g1")]
    long_a = make_job("long-a", 1, 0.0, 1e7, done=1e5, on=["g0"])
    long_b = make_job("long-b", 1, 0.0, 1e7, done=1e5, on=["g1"])
    short = make_job("short", 1, 100.0, 1e4)
    other_long = make_job("other", 1, 100.0, 1e7)
    plan = plan_round([long_a, long_b, short, other_long], gpus, 200.0, PRESETS["gpufair"])
    assert set(plan.admitted) == {"short"}
    # The short one runs unpaced; the long job there keeps only the time it leaves
    # idle (its steps are partly CPU work: 6.25 steps/s alone, 6.76 if GPU-bound).
    (held,) = [n for n in ("long-a", "long-b") if plan.shares[n][0] < 0.5]
    assert plan.admitted["short"] == {"long-a": ("g0",), "long-b": ("g1",)}[held]
    assert plan.shares["short"] == (1.0,) and plan.shares[held][0] == pytest.approx(1 - 6.25 / 6.756756, rel=1e-3)
    (entry,) = plan.queue
    assert entry.job == "other" and entry.reason == "behind more urgent jobs: long-b, short"


@pytest.mark.parametrize("shares", ["time-slicing", "paced"])
def test_under_strict_fifo_no_job_passes_an_earlier_one_that_waits(shares):
    gpus = [Gpu("g0"), Gpu("g1")]
    resident = make_job("resident", 1, 0.0, 1e5, on=["g0"])
    wide = make_job("wide", 2, 10.0, 1e5)  # needs both GPUs: waits for the resident
    narrow = make_job("narrow", 1, 20.0, 1e4)  # would fit on g1
    jobs = [resident, wide, narrow]
    loose = plan_round(jobs, gpus, 30.0, Levers("fifo", "least-loaded", shares, "even", max_per_gpu=1))
    assert loose.admitted == {"narrow": ("g1",)}
    strict = plan_round(jobs, gpus, 30.0, Levers("fifo-strict", "least-loaded", shares, "even", max_per_gpu=1))
    assert strict.admitted == {}
    first, second = strict.queue
    assert (first.job, second.job) == ("wide", "narrow")
    assert second.reason == "behind wide: strict FIFO lets no job pass an earlier one"
    assert second.predicted_start_s == first.predicted_start_s


def test_a_placed_job_says_how_it_shares_and_its_predicted_sd():
    gpus = [Gpu("g0"), Gpu("g1")]
    resident = make_job("resident", 1, 0.0, 1e5, done=5e4, on=["g0"])
    wide = make_job("wide", 2, 50.0, 2e4)  # 100 s alone, arrived 50 s ago
    sliced = plan_round([resident, wide], gpus, 100.0, PRESETS["k8s"]).placed["wide"]
    assert sliced.neighbours == ("resident",) and sliced.how == "time-sliced 2 ways"
    assert sliced.predicted_sd == pytest.approx((50 + 2 * 100) / 100)
    alone = plan_round([wide], gpus, 100.0, PRESETS["gpufair"]).placed["wide"]
    assert alone.how == "alone" and alone.neighbours == () and alone.predicted_sd == pytest.approx(1.5)


@given(fleets(), st.sampled_from(["time-slicing", "paced"]), st.sampled_from(["least-loaded", "sd"]))
@settings(max_examples=200, deadline=None)
def test_under_strict_fifo_every_admitted_job_arrived_before_every_queued_one(fleet, shares,
                                                                            placement):
    jobs, gpus, cap = fleet
    levers = Levers("fifo-strict", placement, shares, "even", max_per_gpu=cap)
    plan = plan_round(jobs, gpus, 600.0, levers, Models(), seed=3)
    key = {j.job: (j.arrival_s, j.job) for j in jobs}
    if plan.queue and plan.admitted:
        assert max(key[n] for n in plan.admitted) < min(key[q.job] for q in plan.queue)


def test_the_first_job_at_risk_gets_a_reservation_and_long_jobs_do_not_backfill_it():
    gpus = [Gpu(f"g{i}") for i in range(4)]
    # Two GPUs busy for another 1000 s; a 4-GPU job, too long to slip in over them,
    # has waited long enough to be at risk; a longer 1-GPU job and a short one
    # arrive after it.
    busy = [make_job(f"b{i}", 1, 0.0, 2e5, done=1e5, on=[f"g{i}"]) for i in range(2)]
    wide = make_job("wide", 4, 0.0, 4e6)
    late_long = make_job("late-long", 1, 1500.0, 3e6)
    late_short = make_job("late-short", 1, 1500.0, 5e4)
    plan = plan_round([*busy, wide, late_long, late_short], gpus, 1600.0, PRESETS["gpufair"])
    assert "wide" not in plan.admitted and "late-long" not in plan.admitted
    assert "late-short" in plan.admitted  # done before the reservation can start
    reasons = {q.job: q.reason for q in plan.queue}
    assert reasons["late-long"] == "GPUs reserved for wide"


@pytest.mark.parametrize("goal, reserved", [(float("inf"), False), (12_000.0, True)])
def test_a_job_due_by_the_makespan_goal_is_at_risk_by_that_deadline(goal, reserved):
    # A 2-GPU job of 10,000 s alone waits for g0. At slow-down target 5 it is due at
    # 50,000 s, far from risk; held to the makespan goal at 12,000 s it has 2,000 s
    # of slack, under the reservation's threshold (0.35 x 10,000 s).
    gpus = [Gpu("g0"), Gpu("g1")]
    resident = make_job("resident", 1, 0.0, 5e5, on=["g0"])
    wide = make_job("wide", 2, 0.0, 2e6)
    board = Board([resident, wide], gpus, 0.0, PRESETS["gpufair"], NoInterference(), 0)
    board.target, board.goal = 5.0, goal
    board.wait(wide, np.array([5000.0, 0.0]), "no room", np.array([5000.0, 0.0]))
    assert (board.reserved_for == "wide") is reserved


def test_a_job_that_can_share_with_no_resident_reserves_the_gpus_that_empty_first():
    # 'x' cannot share with 'y'. Every GPU holds a 'y' job, so no GPU suits the
    # 2-GPU 'x' job now; it is at risk, so it reserves the two that empty first
    # and a long 'y' job may not take them.
    gpus = [Gpu(f"g{i}") for i in range(3)]
    residents = [make_job(f"y{i}", 1, 0.0, 1e5, on=[f"g{i}"], model="y") for i in range(3)]
    wide = make_job("wide", 2, 0.0, 2e6, model="x")
    board = Board([*residents, wide], gpus, 0.0, PRESETS["gpufair"], Models(), 0)
    board.target, board.goal = 1.0, float("inf")
    board.wait(wide, np.zeros(3), "no room", empty_at=np.array([300.0, 100.0, 200.0]))
    assert board.reserved_for == "wide" and list(board.reserved) == [False, True, True]
    assert board.release_s == 200.0 and board.queue[-1].predicted_start_s == 200.0
    assert "cannot share a GPU with the jobs on 3 of the 3 GPUs it may use" in board.queue[-1].reason
    assert list(board.backfill(1e4)) == [True, False, False]


@pytest.mark.parametrize("model, now, first, spare, worse, drain, reserved", [
    ("x", 12_000.0, True, 0, False, 100.0, True),  # only empty GPUs take it; waited its time alone
    ("m", 12_000.0, True, 0, False, 100.0, False),  # it can share: the residents' GPUs take it
    ("x", 5_000.0, True, 0, False, 100.0, False),  # it has not yet waited its time alone
    ("x", 12_000.0, False, 0, False, 100.0, False),  # a more urgent job waits ahead of it
    ("x", 12_000.0, True, 1, False, 100.0, False),  # it needs half the cluster, not more
    ("x", 12_000.0, True, 0, True, 100.0, False),  # a job behind it would end slower
    ("x", 12_000.0, True, 0, False, 20_400.0, False),  # the drain idles over its GPU time
])
def test_the_first_waiting_job_wider_than_half_the_cluster_reserves_empty_gpus_before_risk(
        model, now, first, spare, worse, drain, reserved):
    # 'x' cannot share with 'y'. A 2-GPU job of 10,000 s alone is far from risk at
    # slow-down target 100; without a reservation narrower jobs would take every GPU
    # that empties while the target, rising, keeps its deadline ahead. g1 empties
    # `drain` seconds after g0: waiting for both idles g0 that long, against the
    # job's 20,000 GPU-seconds.
    gpus = [Gpu(f"g{i}") for i in range(3 + spare)]
    residents = [make_job(f"y{i}", 1, 0.0, 1e5, on=[g.name], model="y") for i, g in enumerate(gpus)]
    wide = make_job("wide", 2, 0.0, 2e6, model=model)
    # A 100 s job that arrived with it would end at SD 121 started now; the wide one at 2.2.
    behind = [make_job("short", 1, 0.0, 1e4)] if worse else []
    board = Board([*residents, wide, *behind], gpus, now, PRESETS["gpufair"], Models(), 0)
    board.target, board.goal = 100.0, float("inf")
    assert not board.at_risk(wide)
    if not first:
        board.enqueue(make_job("ahead", 1, 0.0, 1e5), 0.0, "behind more urgent jobs")
    empty_at = np.array([100.0, 100.0 + drain, 1e5, 1e5][:len(gpus)])
    board.wait(wide, np.full(len(gpus), 5e5), "no room", empty_at=empty_at)
    assert (board.reserved_for == "wide") is reserved
    if reserved:
        assert list(board.reserved) == [True, True, False] and board.release_s == 200.0


def test_a_job_that_can_share_with_no_resident_waits_for_gpus_to_empty_in_every_path():
    # Three 'y' jobs hold every GPU, 100, 200 and 300 s from done (rate 100/s),
    # and 'x' cannot share with 'y': a 2-GPU 'x' job can start once the second
    # GPU empties, 200 s from now, whether the round time-slices or paces, and
    # an arrival between rounds is told the same.
    gpus = [Gpu(f"g{i}") for i in range(3)]
    residents = [make_job(f"y{i}", 1, 0.0, 1e5, done=1e5 - 1e4 * (i + 1), on=[f"g{i}"],
                          model="y") for i in range(3)]
    wide = make_job("wide", 2, 0.0, 2e6, model="x")
    for levers in (Levers("sd", "sd", "time-slicing", "even"), PRESETS["gpufair"]):
        plan = plan_round([*residents, wide], gpus, 100.0, levers, Models())
        (queued,) = plan.queue
        assert queued.job == "wide" and queued.predicted_start_s == pytest.approx(200.0)
    arrival = place_arrival(plan_round(residents, gpus, 100.0, PRESETS["gpufair"],
                                       Models()).outlook, wide, Models())
    assert arrival.gpus is None and arrival.predicted_start_s == pytest.approx(200.0)
    # Allowed only on g2, a 1-GPU 'x' job waits for that GPU alone.
    only_g2 = replace(make_job("one", 1, 0.0, 1e6, model="x"), gpus_allowed=frozenset({"g2"}))
    plan = plan_round([*residents, only_g2], gpus, 100.0, PRESETS["gpufair"], Models())
    assert plan.queue[0].predicted_start_s == pytest.approx(300.0)
    assert "the jobs on 1 of the 1 GPUs it may use" in plan.queue[0].reason


def test_the_residents_a_job_at_risk_waits_on_to_empty_run_ahead_of_less_urgent_jobs():
    # 'x' cannot share with 'y'. A 1-GPU 'x' job has waited 1,000 s for a 50 s run:
    # it is the most urgent and at risk, and the 2-GPU 'y' job on both GPUs must end
    # before it can start. A short job that arrived just now on g1 is more urgent
    # than the 'y' job by its own deadline, so pacing would hold the 'y' job back
    # for it, and the GPUs the urgent job waits for would not empty.
    gpus = [Gpu("g0"), Gpu("g1")]
    blocker = make_job("blocker", 2, 0.0, 2e6, done=1e6, on=["g0", "g1"], model="y")
    short = make_job("short", 1, 900.0, 1e4, on=["g1"])
    urgent = make_job("urgent", 1, 0.0, 5e3, model="x")
    plan = plan_round([blocker, short, urgent], gpus, 1000.0, PRESETS["gpufair"], Models())
    assert plan.priority["blocker"] < plan.priority["urgent"] < plan.priority["short"]
    assert plan.shares["blocker"] == (1.0, 1.0) and plan.shares["short"] == (0.0,)
    # An arrival between rounds sees the blocker as urgent as the job it blocks.
    arrival = place_arrival(plan.outlook, make_job("next", 1, 1000.0, 1e4), Models())
    assert arrival.gpus is None and arrival.reason == "behind more urgent jobs: blocker"


def test_under_paced_shares_a_gpu_empties_once_its_residents_have_run_one_after_another():
    # Two 'y' jobs share g0, 100 and 200 s from done alone. Paced, they run there
    # in turn, so g0 empties 300 s from now (not when the longer is done alone, as
    # time-sliced jobs overlap): an 'x' job allowed only on g0 is told 300 s.
    gpus = [Gpu("g0"), Gpu("g1")]
    residents = [make_job(f"y{i}", 1, 0.0, 1e5, done=1e5 - 1e4 * (i + 1), on=["g0"], model="y")
                 for i in range(2)]
    only_g0 = replace(make_job("x", 1, 0.0, 1e6, model="x"), gpus_allowed=frozenset({"g0"}))
    plan = plan_round([*residents, only_g0], gpus, 100.0, PRESETS["gpufair"], Models())
    assert plan.queue[0].job == "x" and plan.queue[0].predicted_start_s == pytest.approx(300.0)
    arrival = place_arrival(plan_round(residents, gpus, 100.0, PRESETS["gpufair"], Models()).outlook,
                            only_g0, Models())
    assert arrival.gpus is None and arrival.predicted_start_s == pytest.approx(300.0)


def test_an_arrival_between_rounds_waits_behind_a_strict_fifo_head():
    gpus = [Gpu("g0"), Gpu("g1")]
    resident = make_job("resident", 1, 0.0, 1e5, on=["g0"])
    wide = make_job("wide", 2, 10.0, 1e5)
    levers = Levers("fifo-strict", "sd", "paced", "even", max_per_gpu=1)
    plan = plan_round([resident, wide], gpus, 30.0, levers)
    late = place_arrival(plan.outlook, make_job("late", 1, 40.0, 1e4), Models())
    assert late.gpus is None and late.reason.startswith("behind wide: strict FIFO")
    loose = plan_round([resident, wide], gpus, 30.0, replace(levers, queue="fifo"))
    assert place_arrival(loose.outlook, make_job("late", 1, 40.0, 1e4), Models()).gpus == ("g1",)


def test_a_gpus_slack_to_the_makespan_goal_counts_every_resident_left_to_run():
    # Paced residents run one at a time: two of 100 s each leave g0 goal - now - 200 s,
    # not goal - now - 100 s, for a newcomer to hold them back.
    gpus = [Gpu("g0"), Gpu("g1")]
    a = make_job("a", 1, 0.0, 1e4, on=["g0"])  # 100 s alone
    b = make_job("b", 1, 0.0, 1e4, on=["g0"])
    plan = plan_round([a, b], gpus, 50.0, PRESETS["gpufair"])
    assert plan.outlook.slack[0] == pytest.approx(plan.outlook.goal - 50.0 - 200.0)
    assert plan.outlook.slack[1] == float("inf")


def test_an_arrival_between_rounds_goes_where_the_round_would_put_it():
    gpus = [Gpu(f"g{i}", f"n{i // 4}") for i in range(8)]
    jobs = [make_job(f"r{i}", 1, 0.0, 1e6, done=1e5, on=[f"g{i}"]) for i in range(5)]
    plan = plan_round(jobs, gpus, 100.0, PRESETS["gpufair"])
    newcomer = make_job("new", 2, 100.0, 1e5)
    arrival = place_arrival(plan.outlook, newcomer, Models())
    again = plan_round([*jobs, newcomer], gpus, 100.0, PRESETS["gpufair"])
    assert arrival.gpus is not None and set(arrival.gpus) == set(again.admitted["new"])
    big = make_job("big", 8, 100.0, 1e9)
    waits = place_arrival(plan.outlook, big, Models())
    (queued,) = plan_round([*jobs, big], gpus, 100.0, PRESETS["gpufair"]).queue
    assert waits.gpus is None and waits.reason == queued.reason
    assert waits.reason.startswith("behind more urgent jobs: r0, r1, r2")


def test_bad_levers_and_fleets_are_clear_errors():
    gpus = [Gpu("g0")]
    with pytest.raises(InvalidArgument, match="unknown queue 'lifo'; choose one of fifo, fifo-strict, las, sd"):
        plan_round([], gpus, 0.0, Levers(queue="lifo"))
    with pytest.raises(InvalidArgument, match="needs 2 GPUs; the cluster has 1"):
        plan_round([make_job("a", 2, 0.0, 10.0)], gpus, 0.0, PRESETS["gpufair"])
    with pytest.raises(InvalidArgument, match="unknown GPU 'g9'"):
        plan_round([make_job("a", 1, 0.0, 10.0, on=["g9"])], gpus, 0.0, PRESETS["gpufair"])



def test_no_job_lends_time_that_a_more_urgent_held_job_waits_for():
    gpus = [Gpu(f"g{i}") for i in range(4)]
    # short-f runs on g2, where the more urgent of the rest, 2-GPU short-d, waits
    # for it (d arrives after f: the cluster keeps up, so d gets no wide slack,
    # and arriving before f it would be the more urgent);
    # long-b (also on g2) would gladly borrow half of f's GPU, but that would
    # delay d as much as f.
    long_a = make_job("long-a", 2, 0.0, 8e3, done=4.8e3, on=["g0", "g1"])
    long_b = make_job("long-b", 2, 0.0, 8e3, done=5.8e3, on=["g2", "g3"])
    short_d = make_job("short-d", 2, 19.0, 1e3, done=5e2, on=["g1", "g2"])
    short_f = make_job("short-f", 1, 18.0, 5e2, done=4e2, on=["g2"])
    plan = plan_round([long_a, long_b, short_d, short_f], gpus, 27.0, PRESETS["gpufair"])
    assert plan.priority["short-f"] < plan.priority["short-d"] < plan.priority["long-b"]
    assert plan.shares["short-f"] == pytest.approx((1.0,))
    assert plan.shares["short-d"] == (0.0, 0.0) and plan.shares["long-b"] == (0.0, 0.0)


def test_a_wide_newcomer_takes_all_of_one_residents_gpus_rather_than_idling_part_of_two():
    """Two 2-GPU residents of like slow-down: a 2-GPU short job on one GPU of each
    would hold both back and idle their other GPUs; on both GPUs of one it idles none."""
    gpus = [Gpu(f"g{i}") for i in range(4)]
    a = make_job("a", 2, 0.0, 1e7, done=1e5, on=["g0", "g1"])
    b = make_job("b", 2, 0.0, 1e7, done=1e5, on=["g2", "g3"])
    short = make_job("short", 2, 100.0, 1e4)
    plan = plan_round([a, b, short], gpus, 200.0, PRESETS["gpufair"])
    assert plan.admitted["short"] in (("g0", "g1"), ("g2", "g3"))
    held = "a" if plan.admitted["short"] == ("g0", "g1") else "b"
    # Held: it keeps only the idle time the short job's steps leave (their CPU part).
    assert max(plan.shares[held]) < 0.1 and min(plan.shares[{"a": "b", "b": "a"}[held]]) > 0.9


def test_gpus_a_held_job_leaves_idle_go_first_and_gangs_whole():
    count = np.ones(6, dtype=int)
    score = np.zeros(6)
    gang = np.array([5, 7, -1, 7, 5, 9])  # GPU 2's resident is held already; 9 has one GPU here
    pick = lambda need: choose("sd", need, np.arange(6), count, np.random.default_rng(0), score, gang=gang)  # noqa: E731
    assert pick(1) == (2,)
    assert pick(2) == (2, 5)  # the one-GPU gang idles nothing more
    assert pick(3) in ((0, 2, 4), (1, 2, 3))  # a whole two-GPU gang with the free GPU


def test_a_resident_not_ready_yet_leaves_its_gpus_time_to_the_others():
    """A more urgent job still starting (no step yet) keeps its GPU and place but
    gets no time: the job it would hold runs meanwhile, on every GPU."""
    gpus = [Gpu("g0"), Gpu("g1")]
    long_job = make_job("long", 2, 0.0, 1e7, done=1e5, on=["g0", "g1"])
    starting = replace(make_job("short", 1, 100.0, 1e4, on=["g1"]), ready=False)
    plan = plan_round([long_job, starting], gpus, 200.0, PRESETS["gpufair"])
    assert plan.shares["long"] == (1.0, 1.0) and "short" not in plan.shares
    ready = plan_round([long_job, replace(starting, ready=True)], gpus, 200.0, PRESETS["gpufair"])
    # Once it steps it runs at full speed (unpaced), lending the long job only a sliver
    # of g1 (its idle time and as much again) so that the long job's g0 keeps busy.
    assert "short" in ready.unpaced and ready.shares["short"][0] >= 1 - 2 * 0.012 / 0.16 - 1e-9
    assert ready.shares["long"][1] < 0.5


def test_the_makespan_goal_is_no_reason_to_wait_when_waiting_ends_later_still():
    # A 2,000 s resident on g0 and seven 1,200 s ones on g1-g7. A 1,000 s newcomer on
    # g0 would push that resident past the makespan goal (2,137.5 s: the 11,400 GPU-s
    # left, packed onto 8 GPUs, plus half), but waiting for a GPU to empty would end
    # it at 2,200 s: it starts at once.
    gpus = [Gpu(f"g{i}") for i in range(9)]
    a = make_job("a", 1, 0.0, 2e5, on=["g0"])
    rest = [make_job(f"b{i}", 1, 0.0, 1.2e5, on=[f"g{i}"]) for i in range(1, 8)]
    new = make_job("new", 1, 0.0, 1e5)
    plan = plan_round([a, *rest, new], gpus[:8], 0.0, PRESETS["gpufair"])
    assert plan.outlook.goal == pytest.approx(1.5 * (2000 + 7 * 1200 + 1000) / 8)
    assert plan.admitted == {"new": ("g0",)} and not plan.queue
    # The same between rounds, against the round's outlook without it.
    before = plan_round([a, *rest], gpus[:8], 0.0, PRESETS["gpufair"])
    assert place_arrival(before.outlook, new, NoInterference()).gpus == ("g0",)
    # A GPU that empties in 10 s: waiting for it ends in time, so it waits.
    c = make_job("c", 1, 0.0, 1e3, on=["g8"])
    plan = plan_round([a, *rest, c, new], gpus, 0.0, PRESETS["gpufair"])
    assert "new" not in plan.admitted and [q.job for q in plan.queue] == ["new"]


@pytest.mark.parametrize("now, spare, first", [(10.0, False, "short"), (100.0, True, "long"),
                                               (100.0, False, "short")])
def test_a_job_late_for_the_makespan_goal_takes_an_empty_gpu_unless_a_more_urgent_one_needs_it(
        now, spare, first):
    # The goal is the long job's own finish alone (1,000 s), or the work left packed
    # plus half of it if later (1,045 s at 100 s on two GPUs), so the long job is
    # late from the moment it waits; g1 is empty. It takes g1 only if the 10 s job,
    # due first, still makes its deadline: with g2 free in 1 s it does; without g2
    # it would wait 250 s for g0, so it keeps g1.
    gpus = [Gpu("g0"), Gpu("g1"), Gpu("g2")][:3 if spare else 2]
    resident = make_job("resident", 1, 0.0, 2.5e4, on=["g0"])
    tail = [make_job("tail", 1, 0.0, 100.0, on=["g2"])] if spare else []
    long = make_job("long", 1, 0.0, 1e5)
    short = make_job("short", 1, 0.0, 1e3)
    plan = plan_round([resident, *tail, long, short], gpus, now, PRESETS["gpufair"])
    work = sum(j.remaining_s() for j in (resident, *tail, long, short))
    packed = now + (1 + MAKESPAN_SLACK) * work / len(gpus)
    assert plan.outlook.goal == pytest.approx(max(1000.0, packed))
    assert late_for_goal(long, now, plan.outlook.goal)
    assert plan.admitted[first] == ("g1",)
    if first == "short":
        assert [q.job for q in plan.queue] == ["long"]
    else:  # the short one waits or slips in beside a resident, not on g1
        assert plan.admitted.get("short") != ("g1",)


def test_a_job_late_for_the_makespan_goal_with_no_empty_gpu_holds_nobody_back():
    # Both GPUs hold a job with 10 s left; the 1,000 s job is 100 s past its latest
    # start for the goal (1,000 s, its own finish alone) but takes only empty GPUs:
    # it waits.
    gpus = [Gpu("g0"), Gpu("g1")]
    busy = [make_job(f"busy{g}", 1, 0.0, 1e3, on=[f"g{g}"]) for g in range(2)]
    long = make_job("long", 1, 0.0, 1e5)
    plan = plan_round([*busy, long], gpus, 100.0, PRESETS["gpufair"])
    assert plan.outlook.goal == pytest.approx(1000.0)
    assert late_for_goal(long, 100.0, plan.outlook.goal)
    assert "long" not in plan.admitted and all(plan.shares[b.job] == (1.0,) for b in busy)


def test_a_claim_for_the_makespan_goal_does_not_delay_a_job_already_past_its_deadline():
    # The 2-GPU job of 10 s has waited 110 s, past any deadline; it starts on g0 and
    # g1 once g1's resident ends in 50 s. The 1,000 s job is late for the goal (its
    # own finish alone, 1,000 s) but claiming the empty g0 would hold the 2-GPU job
    # back 1,000 s more: it does not claim it.
    gpus = [Gpu("g0"), Gpu("g1")]
    resident = make_job("resident", 1, 0.0, 1e4, done=5e3, on=["g1"])
    wide = make_job("wide", 2, 0.0, 2e3)
    long = make_job("long", 1, 0.0, 1e5)
    plan = plan_round([resident, wide, long], gpus, 110.0, PRESETS["gpufair"])
    assert late_for_goal(long, 110.0, plan.outlook.goal)
    assert plan.admitted.get("long") != ("g0",)


def test_a_newcomer_whose_trainers_start_once_placed_leaves_its_gpus_time_to_others_meanwhile():
    """A live submission (`ready` False) is placed ahead of a long resident, but its
    trainers take seconds to start: the round that places it lets the resident run on
    its GPUs. A simulated arrival (`ready` True) starts at once and takes its time."""
    gpus = [Gpu("g0", "n"), Gpu("g1", "n")]
    long = make_job("long", 2, -1000.0, 1e7, done=1e5, on=("g0", "g1"))
    for ready in (False, True):
        short = replace(make_job("short", 1, -60.0, 8000.0), ready=ready)  # a minute late, 80 s alone
        plan = plan_round([long, short], gpus, 0.0, Levers())
        assert "short" in plan.admitted
        if ready:
            # It runs unpaced (lending the long job at most a sliver) and the long job gives way.
            assert "short" in plan.unpaced or plan.shares["short"] == pytest.approx((1.0,))
            assert min(plan.shares["long"]) < 1.0
        else:
            assert "short" not in plan.shares and plan.shares["long"] == pytest.approx((1.0, 1.0))
        assert plan.placed["short"].how == "ahead of its neighbours"  # what it gets once it steps


@pytest.mark.parametrize("preset", ["gpufair", "k8s"])
def test_a_waiting_job_goes_only_onto_the_gpus_it_may_use(preset):
    """A live submission offers its node's devices: the scheduler may know more GPUs
    (other nodes', or devices an earlier run offered), and must not place it on them."""
    gpus = [Gpu(f"g{i}", "n0") for i in range(4)]
    busy = make_job("busy", 1, 0.0, 1e6, on=["g0"])
    waiting = replace(make_job("new", 1, 10.0, 1e4), gpus_allowed=frozenset({"g0"}))
    plan = plan_round([busy, waiting], gpus, 20.0, PRESETS[preset], Models())
    assert plan.admitted.get("new", ("g0",)) == ("g0",)  # time-sliced beside `busy`, or queued for g0
    free = replace(waiting, gpus_allowed=frozenset({"g2", "g3"}))
    plan = plan_round([busy, free], gpus, 20.0, PRESETS[preset], Models())
    assert plan.admitted["new"][0] in {"g2", "g3"}
    view = plan_round([busy], gpus, 20.0, PRESETS["gpufair"], Models()).outlook
    if preset == "gpufair":
        assert place_arrival(view, free, Models()).gpus[0] in {"g2", "g3"}
        assert place_arrival(view, replace(free, gpus_allowed=frozenset({"g9"})), Models()).gpus is None
