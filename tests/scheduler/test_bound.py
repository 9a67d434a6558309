"""The lower bounds on a trace's largest slow-down and makespan
(`sim/bound.py`): exact on cases solved by hand, and never above what a
simulated schedule reaches."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gpufair.common.errors import InvalidArgument
from gpufair.scheduler.sim import SimConfig, load_colocation, simulate
from gpufair.scheduler.sim.bound import makespan_bound, max_sd_bound, trace_bounds
from gpufair.scheduler.sim.workload import TraceJob

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "scheduler"


def test_a_job_alone_has_bound_one():
    assert max_sd_bound([(5.0, 10.0, 2)], 4) == 1.0


def test_a_short_and_a_long_job_on_one_gpu():
    # Short first: SDs 1 and 11/10; no order does better.
    assert max_sd_bound([(0.0, 1.0, 1), (0.0, 10.0, 1)], 1) == pytest.approx(1.1, rel=2e-4)


def test_a_job_never_runs_faster_than_alone():
    # A 4-GPU job of 1 s and a 1-GPU job of 10 s arrive together on 4 GPUs.
    # By S the wide job needs 4 of the 4S GPU-seconds, so the narrow one does
    # a <= 4S - 4 of its work by then, and the 10 - a left at speed 1 must
    # fit in 9S: S >= 14/13. Were the narrow job allowed onto the idle GPUs
    # after the wide one finished, S = 1 would do.
    bound = max_sd_bound([(0.0, 1.0, 4), (0.0, 10.0, 1)], 4)
    assert bound == pytest.approx(14 / 13, rel=2e-4) and bound <= 14 / 13


def test_the_makespan_of_one_job_is_its_time_alone():
    assert makespan_bound([(5.0, 10.0, 2)], 4) == 10.0
    assert makespan_bound([], 4) == 0.0


def test_the_makespan_counts_the_gpus_a_late_arrival_cannot_use():
    # A 2-GPU job of 4 s at 0 and a 4-GPU job of 4 s at 2, on 4 GPUs. The
    # last job alone ends at 6 and the work packed (8 + 16) / 4 takes 6, but
    # two GPUs idle until the wide job arrives: 4 GPU-s of the narrow job are
    # done by 2, and the 20 left take 5 more.
    assert makespan_bound([(0.0, 4.0, 2), (2.0, 4.0, 4)], 4) == pytest.approx(7.0, rel=2e-4)
    assert makespan_bound([(0.0, 4.0, 2), (2.0, 4.0, 4)], 4) <= 7.0


@pytest.mark.parametrize("bound", [max_sd_bound, makespan_bound])
def test_bad_input_is_refused(bound):
    with pytest.raises(InvalidArgument, match="num_gpus must be >= 1"):
        bound([(0.0, 1.0, 1)], 0)
    with pytest.raises(InvalidArgument, match="alone_s > 0"):
        bound([(0.0, 0.0, 1)], 2)
    with pytest.raises(InvalidArgument, match="num_gpus <= the cluster's"):
        bound([(0.0, 1.0, 8)], 4)


@pytest.mark.parametrize("seed", [1, 2])
def test_no_simulated_schedule_beats_the_bound(seed):
    colo = load_colocation(FIX / "gavel-colocation-subset.json", "p100")
    rng = random.Random(seed)
    models = ["ResNet-18 (batch size 128)", "LM (batch size 20)", "ResNet-50 (batch size 64)"]
    trace = tuple(sorted((TraceJob(f"j{i}", rng.uniform(0, 1800), rng.choice(models),
                                   rng.choice([1, 1, 2, 4]), 128, rng.uniform(2e4, 2e5), i + 2)
                          for i in range(24)), key=lambda j: j.arrival_s))
    bounds = trace_bounds(colo, trace, 4)
    assert bounds.max_sd > 1.5  # contended: the bound says something
    for queue, placement, shares in (("fifo", "least-loaded", "time-slicing"),
                                     ("fifo", "packed", "time-slicing"), ("sd", "sd", "paced")):
        result = simulate(colo, trace, SimConfig(4, "even", seed=seed, queue=queue,
                                                 placement=placement, shares=shares))
        assert result.summary()["max_sd"] >= bounds.max_sd
        assert result.makespan_s >= bounds.makespan_s
        assert result.goodput() <= bounds.busy_cap
