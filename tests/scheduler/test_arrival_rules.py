"""The rules a waiting job meets under paced shares and `sd` placement
(`arrival.py`): the polite rule and its refinements (narrow residents, held
wide residents, idle-aware refusal, past the makespan goal), covering whole
blocks (on a drain, early, late, with spare GPUs) and why a job waits."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gpufair.scheduler.policy import admission
from gpufair.scheduler.policy.admission import plan_round
from gpufair.scheduler.policy.arrival import Choice, early_cover, hold_back_reason, idled, \
    paced_choice, place_arrival, worn
from gpufair.scheduler.policy.fleet import PRESETS, Gpu, NoInterference
from gpufair.scheduler.policy.placement import block_labels, covering

from sched_strategies import Models, make_job


def test_the_hold_back_reason_cites_an_sd_only_where_one_would_rise():
    job = make_job("new", 2, 0.0, 1e4)
    free = np.array([True, True, False])
    starting = Choice(None, free, np.zeros(3, dtype=bool), np.zeros(3))  # residents still starting: no SD yet
    assert hold_back_reason(job, starting, []) == "would hold back the jobs on every GPU set it could run on too long"
    running = Choice(None, free, np.zeros(3, dtype=bool), np.array([1.5, 2.25, 9.0]))
    assert hold_back_reason(job, running, []).endswith("too long (their max SD would rise to 2.25)")
    busy = Choice(None, np.array([True, False, False]), np.zeros(3, dtype=bool), np.zeros(3))
    assert hold_back_reason(job, busy, ["a", "b"]) == "behind more urgent jobs: a, b"


@pytest.mark.parametrize("case", ["1-GPU residents", "a 2-GPU resident", "a worse-off resident"])
def test_a_wide_job_that_would_end_worst_by_waiting_holds_back_1_gpu_residents(case):
    """A 4-GPU job of 100 s that has waited 100 s, two GPUs empty and two busy
    for 150 s more. It needs more than half of their time left, so
    `STACK_RATIO` alone would keep it waiting (SD 3.5). Placed now it ends at
    SD 2 and the residents at 1.375: it holds back 1-GPU residents. Not a
    2-GPU one (holding such a job back idles its GPUs outside the
    newcomer's), nor while a resident elsewhere is bound to SD 4 anyway.
    Four more GPUs it may not use keep it at half the cluster or less (a
    wider job covers sooner: the drain test below)."""
    gpus = [Gpu(f"g{i}") for i in range(4)]
    if case == "a 2-GPU resident":
        residents = [make_job("r", 2, 0.0, 8e4, done=5e4, on=["g2", "g3"])]
    else:  # 400 s alone, 150 s left at 300 s: least reachable SD 1.125
        residents = [make_job(f"r{g}", 1, 0.0, 4e4, done=2.5e4, on=[f"g{g}"]) for g in (2, 3)]
    if case == "a worse-off resident":
        gpus += [Gpu("g4"), Gpu("g5")]
        residents += [make_job("late", 1, 0.0, 1e4, on=["g4"]),  # 100 s alone, none done: SD >= 4
                      # A long job keeps the makespan goal far off, so the newcomer's
                      # deadline still comes before the 1-GPU residents'.
                      make_job("long", 1, 300.0, 1e6, on=["g5"])]
    wide = replace(make_job("wide", 4, 200.0, 4e4), gpus_allowed=frozenset(g.name for g in gpus))
    gpus += [Gpu(f"spare{i}") for i in range(4)]
    plan = plan_round([*residents, wide], gpus, 300.0, PRESETS["gpufair"])
    before = plan_round(residents, gpus, 300.0, PRESETS["gpufair"])
    between = place_arrival(before.outlook, wide, NoInterference())
    if case == "1-GPU residents":
        assert plan.admitted == {"wide": ("g0", "g1", "g2", "g3")} and not plan.queue
        assert plan.shares["wide"] == (1.0,) * 4
        assert between.gpus == ("g0", "g1", "g2", "g3")
    else:
        assert not plan.admitted and [q.job for q in plan.queue] == ["wide"]
        assert plan.queue[0].reason.startswith("would hold back the jobs on every GPU set")
        assert between.gpus is None


@pytest.mark.parametrize("case", ["held back", "running", "half the cluster"])
def test_a_newcomer_counts_only_the_hold_it_adds_to_a_wide_resident_held_back_anyway(case):
    """A 4-GPU resident with 1,000 s left; a 2-GPU newcomer of 550 s needs more
    than half of that (`STACK_RATIO`), so it would wait the whole 1,000 s,
    past the round's target. While a more urgent 1-GPU job holds the resident
    back on g0 for 600 s, the resident is held that long anyway: the
    newcomer adds no hold and starts on two of the resident's other GPUs.
    Not where the resident runs, nor where it is only half the cluster
    (four more GPUs the newcomer may not use)."""
    gpus = [Gpu(f"g{i}") for i in range(4)]
    wide = make_job("wide", 4, 0.0, 5e5, done=1e5, on=["g0", "g1", "g2", "g3"])
    new = make_job("new", 2, 200.0, 1.1e5)
    jobs = [wide]
    if case != "running":  # 650 s alone, 600 s left: more urgent than both
        jobs.append(make_job("urgent", 1, 0.0, 6.5e4, done=5e3, on=["g0"]))
    if case == "half the cluster":
        new = replace(new, gpus_allowed=frozenset(g.name for g in gpus))
        gpus += [Gpu(f"spare{i}") for i in range(4)]
    plan = plan_round([*jobs, new], gpus, 200.0, PRESETS["gpufair"])
    if case == "held back":
        assert set(plan.admitted["new"]) < {"g1", "g2", "g3"}
        # Both run unpaced; the resident borrows only the time their steps leave idle.
        assert {"new", "urgent"} <= plan.unpaced and min(plan.shares["new"]) > 0.5
    else:
        assert not plan.admitted
        assert plan.queue[0].reason.startswith("would hold back the jobs on every GPU set")


@pytest.mark.parametrize("held, target, placed", [(600.0, 1.3, True), (0.0, 1.3, False),
                                                  (600.0, 3.0, False)])
def test_the_hold_a_newcomer_adds_counts_only_where_waiting_takes_it_past_the_target(
        held, target, placed):
    """A 550 s newcomer, a GPU whose resident has 1,000 s left and can empty in
    1,000 s: waiting, it would end at SD 2.8. Held back 600 s anyway, it adds
    no hold, so it may go there; not where the target allows SD 2.8, nor
    where nothing holds the resident."""
    job = make_job("new", 1, 0.0, 5.5e4)
    one = lambda x: np.array([x])  # noqa: E731
    choice = paced_choice(job, one(True), one(True), one(1000.0), one(np.inf), one(1.0),
                          one(1 / 1250), one(1), np.random.default_rng(0), now=0.0,
                          narrow=one(False), resident_sd=1.0, wait_from=1000.0, held=one(held),
                          target=target)
    assert (choice.gpus == (0,)) if placed else choice.gpus is None


@pytest.mark.parametrize("target, known, placed", [(20.0, True, False), (5.0, True, True),
                                                  (20.0, False, True)])
def test_a_newcomer_waits_where_stacking_idles_more_than_waiting(target, known, placed):
    """A 100 s 1-GPU newcomer and four GPUs held by one 4-GPU resident with
    1,000 s left. Stacked, it holds the resident back and idles its other
    three GPUs for 100 s; waiting for an empty GPU idles none (it takes a
    GPU that empties) and ends it at SD 11. It waits where the target
    allows SD 11; past the target, or where the caller does not say who
    would be held (no `gang`), it stacks."""
    job = make_job("new", 1, 0.0, 1e4)
    four = lambda x: np.full(4, x)  # noqa: E731
    choice = paced_choice(job, four(True), four(True), four(1000.0), four(np.inf), four(1.0),
                          four(1 / 1250), four(1), np.random.default_rng(0), now=0.0,
                          narrow=four(False), resident_sd=1.0, wait_from=1000.0,
                          gang=four(0) if known else None, target=target)
    assert (choice.gpus is None) != placed
    if not placed:
        assert choice.idles == 3
        assert "other 3 GPUs would then idle" in hold_back_reason(job, choice, ["resident"])


@pytest.mark.parametrize("rem, work, placed", [(800.0, 1000.0, False), (800.0, 300.0, True),
                                              (450.0, 1000.0, True)])
def test_past_the_goal_a_newcomer_stacks_only_on_work_its_wait_outlasts_or_if_short(
        rem, work, placed):
    """The makespan goal 1,000 s away, an empty GPU in 600 s: waiting, the
    newcomer ends past the goal anyway. It may then stack on a GPU whose
    work ahead is done by then (300 s), or if it needs at most half the
    time to the goal (450 s); an 800 s newcomer on a GPU with 1,000 s of
    work ahead would push both far past the goal, so it waits."""
    job = make_job("new", 1, 0.0, 100.0 * rem)
    one = lambda x: np.array([x])  # noqa: E731
    choice = paced_choice(job, one(True), one(True), one(work), one(1000.0 - work), one(1.0),
                          one(1 / 2000), one(1), np.random.default_rng(0), now=0.0,
                          narrow=one(True), resident_sd=1.0, goal_left=1000.0, wait_from=600.0)
    assert (choice.gpus == (0,)) if placed else choice.gpus is None


def test_idled_counts_each_held_residents_gpus_outside_the_set():
    gang = np.array([0, 0, -1, 1, 1, 1])
    assert idled((0, 2, 3), gang) == 1 + 2
    assert idled((0, 1), gang) == 0
    assert idled((2,), gang) == 0


def test_idled_skips_gpus_where_a_resident_is_held_back_already():
    """Job 0 spans GPUs 0-3 but runs only on 0 and 1 (on 2 and 3 another
    job runs first, so `gang` names that one there): holding it back on
    GPU 0 idles GPU 1, not its three other GPUs."""
    gang = np.array([0, 0, 1, -1])
    assert idled((0,), gang) == 1
    assert idled((0, 2), gang) == 1


@pytest.mark.parametrize("late", [True, False])
def test_a_round_keeps_a_newcomer_off_a_wide_resident_it_would_idle_while_the_target_allows(late):
    """A 4-GPU resident with 1,000 s left on g0-g3, a 1-GPU job on g4 the
    newcomer cannot share with, a long one on g5. Stacked on g0-g3, a 100 s
    newcomer idles the wide resident's other three GPUs; waiting ends it at
    SD 11. Where g4's job has waited 30 times its run, the round's target
    is past 11 and the newcomer waits; where it arrived just now, waiting
    would raise the target, so the newcomer stacks."""
    gpus = [Gpu(f"g{i}") for i in range(6)]
    jobs = [make_job("wide", 4, 2900.0, 4.4e5, done=4e4, on=["g0", "g1", "g2", "g3"]),
            make_job("x", 1, 0.0 if late else 2990.0, 1e4, done=5e3, on=["g4"], model="x"),
            make_job("long", 1, 2900.0, 2.01e6, done=1e4, on=["g5"]),
            make_job("new", 1, 3000.0, 1e4, model="y")]
    plan = plan_round(jobs, gpus, 3000.0, PRESETS["gpufair"], Models())
    if late:
        assert "new" not in plan.admitted
        (entry,) = plan.queue
        assert entry.job == "new" and "other 3 GPUs would then idle" in entry.reason
    else:
        assert plan.admitted["new"][0] in {"g0", "g1", "g2", "g3"}


@pytest.mark.parametrize("held_s, placed", [(50.0, False), (300.0, True)])
def test_a_newcomer_that_outlasts_a_wide_residents_hold_counts_the_gpus_it_keeps_idle(
        held_s, placed):
    """The 4-GPU resident of the test above is held back on g0 by a more
    urgent 1-GPU job with `held_s` left. A 100 s newcomer on g1-g3 idles
    nothing more while that job runs longer than it (it stacks, as
    before); where it would outlast that hold, it keeps the resident's
    other three GPUs idle past it, and waits as it would beside a resident
    held by nobody (stacked one after another, such newcomers kept a
    16-GPU job held for 7.5 times its run)."""
    gpus = [Gpu(f"g{i}") for i in range(6)]
    jobs = [make_job("wide", 4, 2900.0, 4.4e5, done=4e4, on=["g0", "g1", "g2", "g3"]),
            make_job("urgent", 1, -3000.0, 1e4 + 100.0 * held_s, done=1e4, on=["g0"]),
            make_job("x", 1, 2990.0, 1e4, done=5e3, on=["g4"], model="x"),
            make_job("long", 1, 2900.0, 2.01e6, done=1e4, on=["g5"]),
            make_job("new", 1, 3000.0, 1e4, model="y")]
    plan = plan_round(jobs, gpus, 3000.0, PRESETS["gpufair"], Models())
    if placed:
        assert plan.admitted["new"][0] in {"g1", "g2", "g3"}
    else:
        assert "new" not in plan.admitted
        (entry,) = plan.queue
        assert entry.job == "new" and "other 3 GPUs would then idle" in entry.reason


@pytest.mark.parametrize("gpus, arrival, target, expected", [
    (2, 0.0, 5.0, True),  # least reachable SD 3.5: past 3 and half the target
    (2, 0.0, 8.0, False),  # ... but not past half of a target of 8
    (2, 1000.0, 1.0, False),  # SD 2.5: under 3
    (1, 0.0, 5.0, False),  # one GPU: holding it back idles no other
])
def test_worn_marks_multi_gpu_jobs_past_three_and_half_the_target(gpus, arrival, target,
                                                                  expected):
    """A job of 1,000 s alone with 500 s left, at 3,000 s."""
    job = make_job("job", gpus, arrival, 2e5 * gpus / 2, done=1.5e5 * gpus / 2, on=["g0"] * gpus)
    assert worn(job, 3000.0, target) is expected


WORN_REASON = "would hold back multi-GPU jobs slowed down too far already"


@pytest.mark.parametrize("on_worn, target, stacks", [
    (True, np.inf, False),
    (True, 11.0, False),  # waiting for the resident takes the newcomer to SD 11: within 11
    (True, 10.0, True),  # ... past 10: it would be the job slowed down too far
    (False, np.inf, True),
])
def test_a_newcomer_does_not_stack_politely_on_a_worn_resident_within_the_target(
        on_worn, target, stacks):
    """A GPU a 100 s newcomer could stack on politely (its resident has
    1,000 s left): not where that resident is worn, and the reason says so,
    unless waiting for it would take the newcomer past the round's target."""
    job = make_job("new", 1, 0.0, 1e4)
    one = lambda x: np.array([x])  # noqa: E731
    choice = paced_choice(job, one(True), one(True), one(1000.0), one(np.inf), one(1.0),
                          one(1 / 1250), one(1), np.random.default_rng(0), now=0.0,
                          narrow=one(False), resident_sd=1.0, wait_from=1000.0,
                          target=target, worn=one(on_worn))
    assert (choice.gpus is not None) is stacks
    if not stacks:
        assert hold_back_reason(job, choice, ["wide"]) == WORN_REASON


@pytest.mark.parametrize("arrival, alone, between_rounds, in_round", [
    # worn, and waiting takes the newcomer to SD 3.7: within the target
    (500.0, 300.0, WORN_REASON, WORN_REASON),
    (500.0, 100.0, "placed", "placed"),  # worn, but waiting would take the newcomer to SD 9
    (2000.0, 300.0, "placed", "other 1 GPUs would then idle"),  # not worn
])
def test_a_round_and_an_arrival_between_rounds_keep_newcomers_off_a_worn_wide_job(
        arrival, alone, between_rounds, in_round):
    """A 2-GPU job of 1,000 s alone with 800 s left on g0-g1, and on g2 a job
    that has waited so long that the round's target is 6.1, at 3,000 s. A
    newcomer is more urgent than the 2-GPU job and short enough to stack on
    it. Arrived at 500 s, that job can end at SD 3.3 at best (past 3 and
    half the target): a newcomer that waiting keeps within the target waits,
    in a round and between rounds; one of 100 s stacks. Arrived at 2,000 s
    (SD 1.8), it is not worn: between rounds the newcomer stacks, and a
    round refuses it only for its other GPU's idle time."""
    gpus = [Gpu(f"g{i}") for i in range(3)]
    jobs = [make_job("wide", 2, arrival, 2e5, done=4e4, on=["g0", "g1"]),
            make_job("long", 1, -1e5, 2.01e6, done=1e4, on=["g2"])]
    new = make_job("new", 1, 3000.0, 100.0 * alone)
    plan = plan_round([*jobs, new], gpus, 3000.0, PRESETS["gpufair"], Models())
    between = place_arrival(plan_round(jobs, gpus, 3000.0, PRESETS["gpufair"], Models()).outlook,
                            new, Models())
    assert between.reason == between_rounds
    assert (between.gpus is None) is (between_rounds != "placed")
    if in_round == "placed":
        assert plan.admitted["new"][0] in {"g0", "g1"}
    else:
        assert "new" not in plan.admitted and in_round in plan.queue[0].reason
    if between.gpus is not None:
        assert between.gpus[0] in {"g0", "g1"}


def two_residents(arrival):
    """Two 2-GPU jobs of 1,500 s alone with 1,000 s left, on g0-g1 and g2-g3."""
    return [make_job("a", 2, arrival, 3e5, done=1e5, on=["g0", "g1"]),
            make_job("b", 2, arrival, 3e5, done=1e5, on=["g2", "g3"])]


def test_a_newcomer_that_waiting_would_make_the_slowest_holds_back_whole_blocks_that_stay_faster():
    # Two 2-GPU jobs (1,500 s alone, arrived at 0) hold the four GPUs for 1,000 s
    # more, and empty together: waiting idles no GPU, so no drain asks for covering.
    # A 4-GPU job of 800 s that arrived at 1,400 s would end at SD (600 + 1,000 +
    # 800) / 800 = 3.0 by waiting, past the round's target (2.53). Held back for its
    # run, the two would end at (2,000 + 800 + 1,000) / 1,500 = 2.53: it covers them.
    gpus = [Gpu(f"g{i}") for i in range(4)]
    wide = make_job("wide", 4, 1400.0, 3.2e5)
    plan = plan_round([*two_residents(0.0), wide], gpus, 2000.0, PRESETS["gpufair"])
    assert plan.admitted["wide"] == ("g0", "g1", "g2", "g3")
    assert plan.shares["b"] == (0.0, 0.0)
    # Had they arrived at -2,000 s, holding them back would end them at 3.87, slower
    # than the newcomer's wait makes it: it waits.
    plan = plan_round([*two_residents(-2000.0), wide], gpus, 2000.0, PRESETS["gpufair"])
    assert "wide" not in plan.admitted and plan.queue[0].job == "wide"
    assert plan.shares["a"] == plan.shares["b"] == (1.0, 1.0)


def test_a_newcomer_far_past_the_target_covers_blocks_that_add_up_to_more_than_it_needs():
    # Two 2-GPU residents (1,500 s alone, 1,000 s left) and a 3-GPU newcomer of
    # 600 s: no whole blocks add up to 3 GPUs. Waiting 1,000 s would end it at SD
    # (1,000 + 600) / 600 = 2.67. Residents that arrived at 1,500 s make the round's
    # target 1.30: past twice that, it takes g0-g2 and the fourth GPU idles, b
    # held back with it (b ends at SD 1.40).
    gpus = [Gpu(f"g{i}") for i in range(4)]
    newcomer = make_job("new", 3, 2000.0, 1.8e5)
    plan = plan_round([*two_residents(1500.0), newcomer], gpus, 2000.0, PRESETS["gpufair"])
    assert plan.admitted == {"new": ("g0", "g1", "g2")}
    assert plan.shares["b"] == (0.0, 0.0)
    # Residents that arrived at 1,200 s make the target 1.50: 2.67 is past it, but
    # not twice, and idling a GPU is not worth it: it waits.
    plan = plan_round([*two_residents(1200.0), newcomer], gpus, 2000.0, PRESETS["gpufair"])
    assert plan.admitted == {} and [entry.job for entry in plan.queue] == ["new"]


@pytest.mark.parametrize("residents_at, arrival, placed", [
    (1200.0, 800.0, True),
    (1200.0, 1000.0, False),  # it has waited less than twice the 600 s it needs
    (-3000.0, 800.0, False),  # waiting takes it only 1.09x past the target
])
def test_a_newcomer_that_has_waited_twice_its_time_covers_blocks_past_a_nearer_target(
        residents_at, arrival, placed):
    # As above, but the 3-GPU newcomer of 600 s arrived at 800 s: waiting the
    # 1,000 s would end it at SD (1,200 + 1,000 + 600) / 600 = 4.67. The round's
    # target, at least its own least reachable SD (3.0), rises as it waits, so
    # twice the target never comes; it has waited twice the time it needs, and 4.67
    # is past 1.25 times the target: it takes g0-g2, the fourth GPU idle.
    gpus = [Gpu(f"g{i}") for i in range(4)]
    newcomer = make_job("new", 3, arrival, 1.8e5)
    plan = plan_round([*two_residents(residents_at), newcomer], gpus, 2000.0,
                      PRESETS["gpufair"])
    if placed:
        assert plan.admitted == {"new": ("g0", "g1", "g2")}
        assert plan.shares["b"] == (0.0, 0.0)
    else:
        assert plan.admitted == {} and [entry.job for entry in plan.queue] == ["new"]


def test_late_covering_leaves_alone_a_job_still_starting():
    # A live submission placed on both GPUs, its trainers still starting: its
    # slow-down clock stands still until it steps (arrival 1,999 s at 2,000 s). A
    # submission for the same GPUs waiting since 1,000 s would end past the target
    # by waiting, and holding the starting job back would look free: it waits.
    gpus = [Gpu("g0"), Gpu("g1")]
    starting = replace(make_job("first", 2, 1999.0, 1.6e5, on=["g0", "g1"]), ready=False)
    waiting = replace(make_job("second", 2, 1000.0, 1.6e5), ready=False)
    plan = plan_round([starting, waiting], gpus, 2000.0, PRESETS["gpufair"])
    assert plan.admitted == {} and [entry.job for entry in plan.queue] == ["second"]
    # Once it steps it is an ordinary resident, and the rule covers it.
    plan = plan_round([replace(starting, ready=True), waiting], gpus, 2000.0, PRESETS["gpufair"])
    assert plan.admitted == {"second": ("g0", "g1")}


def test_block_labels_join_the_gpus_of_resident_jobs():
    labels = block_labels([[0, 1], [1, 2], [4]], 6)
    assert labels[0] == labels[1] == labels[2]
    assert len({labels[0], labels[3], labels[4], labels[5]}) == 4


@pytest.mark.parametrize("need, ok3, want", [
    (4, True, (4, 5, 6, 7)),  # the empty GPUs first
    (6, True, (0, 1, 2, 3, 4, 5)),  # then whole blocks
    (5, False, None),  # a block with a GPU it may not take is not whole
    (8, True, tuple(range(8)))])
def test_covering_takes_whole_blocks_and_empty_gpus_first(need, ok3, want):
    labels = block_labels([[0, 1, 2, 3]], 8)
    ok = np.ones(8, dtype=bool)
    ok[3] = ok3
    occupied = np.arange(8) < 4
    assert covering(labels, ok, occupied, need) == want


@pytest.mark.parametrize("spare, want", [
    (0, None),  # no blocks add up to 5
    (1, (4, 5, 6, 7, 8)),  # 5 of the 6-GPU block's, the last one idle
    (4, (4, 5, 6, 7, 8))])  # the smallest sum past 5 wins
def test_covering_takes_blocks_that_add_up_to_more_only_with_spare(spare, want):
    labels = block_labels([[0, 1, 2, 3], [4, 5, 6, 7, 8, 9]], 10)
    ok = np.ones(10, dtype=bool)
    assert covering(labels, ok, np.ones(10, dtype=bool), 5, spare) == want


def no_cover(job, choice, *_):
    """`late_cover` or `early_cover` turned off: no GPUs."""
    return np.zeros_like(choice.free)


def test_a_wide_job_that_would_wait_for_a_long_drain_takes_whole_blocks_at_once(monkeypatch):
    # Late covering (tested above) would cover for each newcomer here, as each would
    # wait past the round's target while the residents are 100 times longer: off.
    # So is early covering (tested below), which would take them for `longer`.
    monkeypatch.setattr(admission, "late_cover", no_cover)
    monkeypatch.setattr(admission, "early_cover", no_cover)
    # Two 2-GPU jobs hold the four GPUs, one for 1,000 s more and one for 3,000 s.
    # A 4-GPU job of 800 s that has waited 2,000 s is more urgent than both: waiting
    # for the second to end would idle the first one's GPUs for 2,000 s, more than
    # its own 3,200 GPU-seconds. It takes all four at once and holds both back;
    # held together, they idle no GPU.
    gpus = [Gpu(f"g{i}") for i in range(4)]
    first = make_job("first", 2, 0.0, 2e7, done=2e7 - 2e5, on=["g0", "g1"])
    second = make_job("second", 2, 0.0, 2e7, done=2e7 - 6e5, on=["g2", "g3"])
    wide = make_job("wide", 4, 0.0, 3.2e5)
    plan = plan_round([first, second, wide], gpus, 2000.0, PRESETS["gpufair"])
    assert plan.admitted["wide"] == ("g0", "g1", "g2", "g3")
    assert plan.shares["wide"] == (1.0,) * 4
    assert plan.shares["first"] == plan.shares["second"] == (0.0, 0.0)
    # Arriving between rounds it goes there too.
    arrival = place_arrival(plan_round([first, second], gpus, 2000.0,
                                       PRESETS["gpufair"]).outlook, wide, NoInterference())
    assert arrival.gpus == ("g0", "g1", "g2", "g3")
    # A 1-GPU job's wait idles no other GPU: it waits for the first to empty.
    narrow = make_job("narrow", 1, 0.0, 1.6e5)
    plan = plan_round([first, second, narrow], gpus, 2000.0, PRESETS["gpufair"])
    assert "narrow" not in plan.admitted
    # Nor does a 4-GPU job of 2,100 s: the drain idles less than half its 8,400
    # GPU-seconds (`WIDE_COVER_RATIO`: it needs more than half the cluster).
    longer = make_job("longer", 4, 0.0, 8.4e5)
    plan = plan_round([first, second, longer], gpus, 2000.0, PRESETS["gpufair"])
    assert "longer" not in plan.admitted and plan.queue[0].job == "longer"
    # One of 1,100 s does (2,200 < 4,000), unless four more GPUs it may not use make
    # it half the cluster: then its whole 4,400 GPU-seconds count (`COVER_RATIO`).
    shorter = make_job("shorter", 4, 0.0, 4.4e5)
    plan = plan_round([first, second, shorter], gpus, 2000.0, PRESETS["gpufair"])
    assert plan.admitted["shorter"] == ("g0", "g1", "g2", "g3")
    halved = replace(shorter, gpus_allowed=frozenset(g.name for g in gpus))
    plan = plan_round([first, second, halved], [*gpus, *(Gpu(f"spare{i}") for i in range(4))],
                      2000.0, PRESETS["gpufair"])
    assert "shorter" not in plan.admitted and plan.queue[0].job == "shorter"


def test_a_wide_job_covers_a_shorter_drain_where_those_it_holds_back_stay_within_the_target(
        monkeypatch):
    monkeypatch.setattr(admission, "late_cover", no_cover)  # as above
    # Two 2-GPU jobs of 4,000 s alone with 1,000 and 3,000 s left hold the four GPUs.
    # Waiting for the second idles the first's GPUs for 4,000 GPU-seconds: under
    # half a 4-GPU job's 8,400 (2,100 s alone; `WIDE_COVER_RATIO`), over a tenth
    # (`WIDE_EARLY_RATIO`). Held back for its run, the second would end at SD
    # (2,000 + 3,000 + 2,100) / 4,000 = 1.78, within the round's target (1.95, the
    # newcomer's least reachable slow-down): it takes all four at once.
    gpus = [Gpu(f"g{i}") for i in range(4)]

    def residents(arrival):
        return [make_job("first", 2, arrival, 8e5, done=6e5, on=["g0", "g1"]),
                make_job("second", 2, arrival, 8e5, done=2e5, on=["g2", "g3"])]

    wide = make_job("wide", 4, 0.0, 8.4e5)
    plan = plan_round([*residents(0.0), wide], gpus, 2000.0, PRESETS["gpufair"])
    assert plan.admitted == {"wide": ("g0", "g1", "g2", "g3")}
    assert plan.shares["first"] == plan.shares["second"] == (0.0, 0.0)
    # Residents that arrived at -2,000 s would end at 2.28, past the target (2.03).
    plan = plan_round([*residents(-2000.0), wide], gpus, 2000.0, PRESETS["gpufair"])
    assert plan.admitted == {} and [entry.job for entry in plan.queue] == ["wide"]
    # On eight GPUs it needs half the cluster, not more: the drain must idle its
    # whole GPU time (`COVER_RATIO`), as for any job that narrow.
    halved = replace(wide, gpus_allowed=frozenset(g.name for g in gpus))
    plan = plan_round([*residents(0.0), halved],
                      [*gpus, *(Gpu(f"spare{i}") for i in range(4))], 2000.0,
                      PRESETS["gpufair"])
    assert plan.admitted == {} and [entry.job for entry in plan.queue] == ["wide"]


@pytest.mark.parametrize("waited, target, want", [
    (2.0, 5.0, [True] * 4),
    (1.5, 5.0, [True, True, False, False]),  # the second would end slower than it waits
    (2.0, 1.5, [True, True, False, False]),  # ... or past the round's target
])
def test_early_cover_holds_back_no_one_past_the_target_or_the_newcomers_wait(
        waited, target, want):
    # As above: GPUs g0-g1 empty in 1,000 s, g2-g3 in 3,000 s; held back for the
    # 4-GPU newcomer's 2,100 s, their jobs would end at SD 1.3 and 1.78.
    job = make_job("wide", 4, 0.0, 8.4e5)
    room, free = np.ones(4, dtype=bool), np.ones(4, dtype=bool)
    choice = Choice(None, free, free, np.array([1.3, 1.3, 1.78, 1.78]), waited=waited)
    empty_at = np.array([1000.0, 1000.0, 3000.0, 3000.0])
    got = early_cover(job, choice, room, empty_at, np.full(4, 1e9), target)
    assert got.tolist() == want
    # A 2-GPU job of 2,100 s waiting for g1 (g0 idling 3,000 s, over a tenth of its
    # 4,200 GPU-seconds) is not wider than half the four GPUs: no early cover.
    narrow = make_job("narrow", 2, 0.0, 4.2e5)
    drain = np.array([0.0, 3000.0, 3000.0, 3000.0])
    assert not early_cover(narrow, choice, room, drain, np.full(4, 1e9), target).any()
    assert early_cover(job, choice, room, drain, np.full(4, 1e9), target).any()
