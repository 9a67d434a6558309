"""The lower bound on a trace's largest slow-down (`sim/bound.py`): exact on
cases solved by hand, and never above what a simulated schedule reaches."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gpufair.common.errors import InvalidArgument
from gpufair.scheduler.sim import SimConfig, load_colocation, simulate
from gpufair.scheduler.sim.bound import max_sd_bound, trace_bound
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


def test_bad_input_is_refused():
    with pytest.raises(InvalidArgument, match="num_gpus must be >= 1"):
        max_sd_bound([(0.0, 1.0, 1)], 0)
    with pytest.raises(InvalidArgument, match="alone_s > 0"):
        max_sd_bound([(0.0, 0.0, 1)], 2)
    with pytest.raises(InvalidArgument, match="num_gpus <= the cluster's"):
        max_sd_bound([(0.0, 1.0, 8)], 4)


@pytest.mark.parametrize("seed", [1, 2])
def test_no_simulated_schedule_beats_the_bound(seed):
    colo = load_colocation(FIX / "gavel-colocation-subset.json", "p100")
    rng = random.Random(seed)
    models = ["ResNet-18 (batch size 128)", "LM (batch size 20)", "ResNet-50 (batch size 64)"]
    trace = tuple(sorted((TraceJob(f"j{i}", rng.uniform(0, 1800), rng.choice(models),
                                   rng.choice([1, 1, 2, 4]), 128, rng.uniform(2e4, 2e5), i + 2)
                          for i in range(24)), key=lambda j: j.arrival_s))
    bound = trace_bound(colo, trace, 4)
    assert bound > 1.5  # contended: the bound says something
    for queue, placement, shares in (("fifo", "least-loaded", "time-slicing"),
                                     ("fifo", "packed", "time-slicing"), ("sd", "sd", "paced")):
        result = simulate(colo, trace, SimConfig(4, "even", seed=seed, queue=queue,
                                                 placement=placement, shares=shares))
        assert result.summary()["max_sd"] >= bound
