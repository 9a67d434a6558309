"""Paced shares: the speed model and how the planner hands GPU time out."""

from __future__ import annotations

import pytest

from gpufair.scheduler.policy.fleet import FleetJob, NoInterference
from gpufair.scheduler.policy.paced import (IDLE_LOSS, LEND_MAX, Filler, PacedJob, PacedRank,
                                            best_fit, overlap_efficiency, paced_speeds)


class Pairs:
    """Every pair keeps `eta` of its time-sliced speed."""

    def __init__(self, eta: float) -> None:
        self.eta = eta

    def efficiency(self, model, neighbours):
        return self.eta if neighbours else 1.0

    def compatible(self, model, other):
        return True


def rank(gpu: str, share: float, batch: int = 8) -> PacedRank:
    return PacedRank(gpu, share, 0.1, 0.0125, batch)  # 0.2 s a step at batch 8


def test_a_rank_gets_its_share_and_the_tightest_rank_sets_the_speed():
    rates, busy = paced_speeds([PacedJob("m", 16, (rank("a", 1.0), rank("b", 0.5)))],
                               NoInterference())
    assert rates[0] == pytest.approx(16 * 0.5 / 0.2)  # b's half of the GPU sets the pace
    assert busy == {"a": pytest.approx(0.5), "b": pytest.approx(0.5)}


def test_held_ranks_cost_nothing_and_interference_grows_with_the_neighbours_share():
    alone = paced_speeds([PacedJob("x", 8, (rank("g", 1.0),)),
                          PacedJob("y", 8, (rank("g", 0.0),))], Pairs(0.6))[0]
    assert alone[0] == pytest.approx(8 / 0.2) and alone[1] == 0
    half = paced_speeds([PacedJob("x", 8, (rank("g", 0.5),)),
                         PacedJob("y", 8, (rank("g", 0.5),))], Pairs(0.6))[0]
    assert half[0] == pytest.approx(8 * 0.5 * 0.6 / 0.2)  # the measured pair loss
    sliver = paced_speeds([PacedJob("x", 8, (rank("g", 0.9),)),
                           PacedJob("y", 8, (rank("g", 0.1),))], Pairs(0.6))[0]
    assert sliver[0] == pytest.approx(8 * 0.9 * overlap_efficiency(0.6, 0.1) / 0.2)
    assert overlap_efficiency(0.6, 0.0) == 1.0 and overlap_efficiency(0.6, 0.7) == 0.6


def fleet_job(name: str, gpus: int, batch: int = 64, done: float = 0.0, arrival: float = 0.0,
              total: float = 1e5) -> FleetJob:
    return FleetJob(name, gpus, batch, arrival, total, 100.0 * gpus, 0.01, 0.05, done, "m",
                    rank_cap=batch)


def test_the_joint_split_moves_samples_off_the_rank_with_less_time():
    job = fleet_job("j", 2)
    split, steps = best_fit(job, [1.0, 0.25], [1.0, 1.0], joint=True)
    assert sum(split) == 64 and split[0] > split[1] >= 1
    even_split, even_steps = best_fit(job, [1.0, 0.25], [1.0, 1.0], joint=False)
    assert even_split == (32, 32) and steps > 2 * even_steps
    # Ranks then finish together (to rounding), each within its time.
    times = [(0.05 + 0.01 * b) / a for b, a in zip(split, (1.0, 0.25))]
    assert max(times) - min(times) < 0.01 / 0.25 + 1e-9


def test_more_urgent_jobs_run_alone_and_others_are_held():
    filler = Filler(3, NoInterference(), 0.05, joint=True)
    assert filler.fit(fleet_job("a", 2), [0, 1]) == (32, 32)
    assert filler.fit(fleet_job("b", 2), [1, 2]) is None  # GPU 1 is taken
    assert filler.fit(fleet_job("c", 1), [2]) == (64,)
    shares = filler.shares()
    assert shares["a"] == pytest.approx((1.0, 1.0)) and shares["c"] == pytest.approx((1.0,))
    assert filler.left == pytest.approx([0.0, 0.0, 0.0])


def test_a_held_job_borrows_a_sliver_and_every_gpu_stays_within_its_time():
    filler = Filler(3, Pairs(0.8), 0.05, joint=True)
    small = fleet_job("small", 1, batch=64)
    wide = fleet_job("wide", 3, batch=96)
    assert filler.fit(small, [0]) is not None
    assert filler.fit(wide, [0, 1, 2]) is None
    split = filler.lend(wide, [0, 1, 2])
    assert split is not None and split[0] < split[1] and sum(split) == 96
    shares = filler.shares()
    assert 0 < shares["wide"][0] <= LEND_MAX
    assert shares["small"][0] + shares["wide"][0] <= 1 + 1e-9
    assert all(-1e-9 <= x <= 1 for x in filler.left)
    # The plan divides GPU 0; the lender's trainers run unpaced, the borrower paced.
    assert filler.unpaced() == {"small"} and shares["small"][0] < 1


def test_no_loan_that_would_push_a_lender_past_the_slow_down_cap():
    # The lender is exactly on its target (SD 1.0 at full speed, cap 1.0): any loan
    # would slow it past the cap.
    lender = fleet_job("urgent", 1, arrival=-500.0, done=5e4)  # 500 s in, 500 s left alone
    filler = Filler(3, Pairs(0.8), 0.05, joint=True, now=0.0, sd_cap=1.0)
    assert filler.fit(lender, [0]) is not None
    assert filler.lend(fleet_job("wide", 3, batch=96), [0, 1, 2]) is None
    assert filler.shares()["urgent"] == pytest.approx((1.0,))


def test_a_lender_with_little_slack_lends_what_keeps_it_within_the_cap():
    # 500 s in, 500 s left alone: SD 1.0 at full speed; at cap 1.1 it may slow to
    # 500 / 600 of its speed, so it offers a sixth of its GPU, not LEND_MAX (which
    # it could not afford: no loan at all).
    lender = fleet_job("urgent", 1, arrival=-500.0, done=5e4)
    filler = Filler(3, NoInterference(), 0.05, joint=True, now=0.0, sd_cap=1.1)
    assert filler.fit(lender, [0]) is not None
    assert filler.lend(fleet_job("wide", 3, batch=96), [0, 1, 2]) is not None
    shares = filler.shares()
    assert shares["urgent"][0] >= 5 / 6 - 1e-6
    assert 0.05 <= shares["wide"][0] <= 1 / 6 + 1e-6


def gappy_job(name: str, gpus: int, batch: int = 64, sec_per_sample: float = 0.005) -> FleetJob:
    """A job whose steps are partly CPU work: 0.64 s a step alone at 100 samples/s per
    GPU, of which its GPU is busy 0.37 s (at 0.005 s a sample), 1000 s of work alone."""
    return FleetJob(name, gpus, batch, 0.0, 1e5 * gpus, 100.0 * gpus, sec_per_sample, 0.05, 0.0,
                    "m", rank_cap=batch)


def test_a_borrower_with_a_long_kernel_gets_only_the_idle_time_its_lender_can_afford():
    # The lender leaves 42 % of its GPU idle between its steps. A 1-GPU borrower there
    # runs 0.53 s kernels: given all that time, the lender would find one running on
    # 42 % of its steps and wait ~0.11 s for it, past its cap (SD 1.0 now, cap 1.1).
    # It gets a part that keeps the lender's waits within the cap.
    filler = Filler(2, NoInterference(), 0.05, joint=True, now=0.0, sd_cap=1.1)
    assert filler.fit(gappy_job("urgent", 1), [0]) is not None
    idle = 1 - 0.37 / 0.64
    assert filler.left[0] == pytest.approx(idle)
    assert filler.lend(fleet_job("long", 1, batch=48), [0]) is not None
    share = filler.shares()["long"][0]
    assert 0.05 <= share < idle / 2
    assert (0.64 + 0.5 * share * 0.53) / 0.64 <= 1.1  # the lender's slow-down, at most


def test_a_lender_at_its_cap_lends_idle_time_for_a_little_of_its_speed_and_no_more():
    # At its cap (SD 1.0, cap 1.0) the lender may still lose IDLE_LOSS to keep its idle
    # time busy: a 2-GPU borrower with a free GPU keeps few samples (short kernels) on
    # the shared one; a 1-GPU borrower with 1.33 s kernels costs it more than that.
    filler = Filler(2, NoInterference(), 0.05, joint=True, now=0.0, sd_cap=1.0)
    assert filler.fit(gappy_job("urgent", 1), [0]) is not None
    split = filler.lend(fleet_job("wide", 2), [0, 1])
    assert split is not None and split[0] < split[1]
    share = filler.shares()["wide"][0]
    assert (0.64 + 0.5 * share * (0.05 + 0.01 * split[0])) / 0.64 <= 1 / (1 - IDLE_LOSS)
    filler = Filler(2, NoInterference(), 0.05, joint=True, now=0.0, sd_cap=1.0)
    assert filler.fit(gappy_job("urgent", 1), [0]) is not None
    assert filler.lend(fleet_job("long", 1, batch=128), [0]) is None
    assert set(filler.shares()) == {"urgent"}


def test_a_borrower_that_moves_its_samples_elsewhere_fills_the_idle_time_within_the_cap():
    # The same lender and a 2-GPU borrower whose other GPU is free: it keeps few
    # samples on the shared GPU and takes at least the idle time there.
    filler = Filler(2, NoInterference(), 0.05, joint=True, now=0.0, sd_cap=1.1)
    urgent = gappy_job("urgent", 1)
    assert filler.fit(urgent, [0]) is not None
    split = filler.lend(fleet_job("wide", 2), [0, 1])
    assert split is not None and split[0] < split[1]
    assert filler.shares()["wide"][0] > 1 - 0.37 / 0.64 - 0.01  # (at least) the idle time
    assert "urgent" in filler.unpaced()


def test_a_borrower_with_a_free_gpu_takes_a_sliver_under_the_minimum_share_rather_than_wait():
    # The lender keeps its GPU 97 % busy: its idle time (3 %) is under the 5 % minimum
    # share. A 2-GPU borrower whose other GPU is free runs there with one sample on the
    # shared GPU (a short kernel) instead of being held with that GPU idle.
    lender = FleetJob("urgent", 1, 64, 0.0, 1e5, 100.0, 0.0097, 0.0, 0.0, "m", rank_cap=64)
    filler = Filler(2, NoInterference(), 0.05, joint=True, now=0.0, sd_cap=1.0)
    assert filler.fit(lender, [0]) is not None
    assert 0 < filler.left[0] < 0.05
    wide = FleetJob("wide", 2, 64, 0.0, 1e5, 500.0, 0.004, 0.0, 0.0, "m", rank_cap=64)  # 32 x 4 ms a step alone
    split = filler.lend(wide, [0, 1])
    assert split == (1, 63)
    shares = filler.shares()
    assert 0 < shares["wide"][0] < 0.05 and shares["wide"][1] == pytest.approx(1.0)
    assert all(-1e-9 <= x <= 1 for x in filler.left)  # the plan divides GPU 0 within its time
    # A 1-GPU borrower there gets nothing: a sliver is all it would have.
    filler = Filler(2, NoInterference(), 0.05, joint=True, now=0.0, sd_cap=1.0)
    assert filler.fit(lender, [0]) is not None
    assert filler.lend(fleet_job("small", 1), [0]) is None


def test_the_joint_split_rounds_so_that_the_sliver_rank_does_not_slow_the_job():
    # Continuous optimum: ~1.5 samples on the rank with 3 % of a GPU; rounding up to 2
    # would make that rank the bottleneck, 1 leaves the full GPU setting the pace.
    job = FleetJob("j", 2, 64, 0.0, 1e5, 200.0, 0.004, 0.0, 0.0, "m", rank_cap=64)
    split, steps = best_fit(job, [1.0, 0.024], [1.0, 1.0], joint=True)
    assert split == (63, 1)
    assert steps == pytest.approx(1.0 / (63 * 0.004))


def test_a_sliver_gets_the_little_more_than_idle_time_that_keeps_its_job_at_its_own_gpus_pace():
    # The lender (at its cap) leaves 2 % of its GPU idle. The borrower's one sample
    # there costs 7 ms of kernel (3 ms of it fixed a step), and its other rank's 63
    # samples 0.25 s: at the idle 2 % the sliver would take 0.35 s a step and pace the
    # whole job, its own GPU idle 30 % of the time. The lender gives the ~1 % more
    # that keeps pace, within IDLE_LOSS of its speed.
    lender = FleetJob("urgent", 1, 16, 0.0, 1e4, 460.0, 0.00213, 0.0, 0.0, "m")
    wide = FleetJob("wide", 2, 64, 0.0, 1e5, 489.0, 0.00397, 0.003, 0.0, "m")
    filler = Filler(2, NoInterference(), 0.05, joint=True, now=0.0, sd_cap=1.0)
    assert filler.fit(lender, [0]) is not None
    idle = float(filler.left[0])
    assert 0.015 < idle < 0.025 and (0.003 + 0.00397) / idle > 0.003 + 0.00397 * 63
    assert filler.lend(wide, [0, 1]) == (1, 63)
    shares = filler.shares()
    assert shares["wide"][1] == pytest.approx(1.0)  # its own GPU runs full
    assert idle < shares["wide"][0] <= idle + IDLE_LOSS * (1 - idle) + 1e-9
    assert (0.003 + 0.00397) / shares["wide"][0] <= (0.003 + 0.00397 * 63) * (1 + 1e-6)
    assert shares["urgent"][0] + shares["wide"][0] <= 1 + 1e-9


def test_a_loan_too_dear_in_full_for_the_interference_it_brings_is_made_smaller():
    # The lender (500 s in, 500 s left alone; cap 2.0) may lose two thirds of its speed,
    # so it offers LEND_MAX of its GPU. At that share the pair's interference (eta 0.3)
    # would cost it 85 % of its speed, past its cap. A smaller part of the offer keeps
    # it within the cap, and the 4-GPU borrower, whose three other GPUs are free, keeps
    # few samples on the shared one.
    lender = fleet_job("urgent", 1, arrival=-500.0, done=5e4)
    wide = FleetJob("wide", 4, 64, 0.0, 1e5, 395.0, 0.01, 0.002, 0.0, "m", rank_cap=64)
    filler = Filler(4, Pairs(0.3), 0.05, joint=True, now=0.0, sd_cap=2.0)
    assert filler.fit(lender, [0]) is not None
    split = filler.lend(wide, [0, 1, 2, 3])
    assert split is not None and split[0] < min(split[1:])
    shares = filler.shares()
    taken = shares["wide"][0]
    assert 0 < taken < LEND_MAX
    assert shares["urgent"][0] + taken <= 1 + 1e-9
    kept = (1 - taken) * overlap_efficiency(0.3, taken)  # the lender's speed, of its own
    assert (500.0 + 500.0 / kept) / 1000.0 <= 2.0
