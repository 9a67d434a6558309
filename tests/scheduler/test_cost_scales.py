"""The cost model at N GPUs: measured N-GPU speeds, the sync cost they
imply, and what the co-location data forbids."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpufair.common.errors import InvalidArgument
from gpufair.scheduler.sim import SimConfig, load_colocation, simulate
from gpufair.scheduler.sim.generate import exclusive_samples_per_s, gavel_job_types, gavel_trace

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "scheduler"
COLO = FIX / "gavel-colocation-subset.json"


def _file(tmp_path: Path, entries: dict) -> Path:
    path = tmp_path / "colo.json"
    path.write_text(json.dumps({"t4": entries}))
    return path


def test_measured_scales_give_the_measured_speed_and_sync_is_per_step(tmp_path):
    model = "ResNet-18 (batch size 64)"
    path = _file(tmp_path, {
        f"('{model}', 1)": {"null": 10.0},
        f"('{model}', 2)": {"null": 16.0},  # sub-linear: 0.8 of 2 x 10
        f"('{model}', 8)": {"null": 40.0},
    })
    colo = load_colocation(path, "t4")
    cost = colo.cost(model)
    for n, steps in ((2, 16.0), (8, 40.0)):
        assert exclusive_samples_per_s(colo, model, n) == pytest.approx(steps * 64)
    # The sync cost is a per-step constant: the per-sample part is the 1-GPU one.
    assert cost.at(2).sec_per_sample == pytest.approx(cost.at(1).sec_per_sample)
    assert cost.at(2).sec_per_step == pytest.approx(cost.at(1).sec_per_step + 2 / 16 - 1 / 10)
    # Unmeasured scales interpolate in N, and keep the largest measured one beyond it.
    sync = {n: cost.at(n).sec_per_step - cost.sec_per_step for n in (2, 4, 8, 16)}
    assert sync[2] < sync[4] < sync[8] == pytest.approx(sync[16])
    assert sync[4] == pytest.approx(sync[2] + (sync[8] - sync[2]) * 2 / 6)


def test_superlinear_scale_shrinks_the_rank_cost_instead_of_a_negative_sync(tmp_path):
    model = "ResNet-50 (batch size 64)"
    path = _file(tmp_path, {f"('{model}', 1)": {"null": 1.0},
                            f"('{model}', 2)": {"null": 2.1}})
    colo = load_colocation(path, "t4")
    at2 = colo.cost(model).at(2)
    assert at2.sec_per_step >= 0 and at2.sec_per_sample < colo.cost(model).sec_per_sample
    assert exclusive_samples_per_s(colo, model, 2) == pytest.approx(2.1 * 64)


def test_only_one_gpu_measured_scales_linearly(tmp_path):
    model = "Transformer (batch size 32)"
    colo = load_colocation(_file(tmp_path, {f"('{model}', 1)": {"null": 4.0}}), "t4")
    assert colo.scales_measured(model) == (1,)
    assert exclusive_samples_per_s(colo, model, 8) == pytest.approx(8 * 4.0 * 32)


def test_bare_model_keys_are_one_gpu_measurements_as_in_gavels_simulator_files(tmp_path):
    a, b = "ResNet-18 (batch size 64)", "A3C"
    colo = load_colocation(_file(tmp_path, {
        a: {"null": 10.0, a: [4.0, 4.0], b: [4.0, 0.6]},
        b: {"null": 2.0, a: [0.6, 4.0], b: [0.0, 0.0]},
    }), "t4")
    assert colo.scales_measured(a) == (1,) and exclusive_samples_per_s(colo, a, 1) == pytest.approx(640)
    assert colo.efficiency(a, [b]) == pytest.approx(2 * 4.0 / 10.0)
    assert colo.efficiency(b, [a]) == pytest.approx(2 * 0.6 / 2.0)
    assert not colo.compatible(b, b) and colo.compatible(a, b)


@pytest.mark.parametrize("key", ["('ResNet-18', 'x')", "(1, 2, 3)", " "])
def test_a_malformed_key_names_itself(tmp_path, key):
    with pytest.raises(InvalidArgument, match="co-location key"):
        load_colocation(_file(tmp_path, {key: {"null": 1.0}}), "t4")


@pytest.mark.parametrize("gpu_type", ["k80", "p100"])
def test_every_job_alone_has_slowdown_one_against_its_measured_exclusive_time(gpu_type):
    """Each job of a generated trace, simulated with the cluster to itself,
    finishes in exactly duration = total / measured speed at its GPU count."""
    colo = load_colocation(COLO, gpu_type)
    trace = gavel_trace(colo, 40, 600.0, seed=4)
    assert {j.num_gpus for j in trace} >= {1, 2}
    for job in trace:
        alone = job.total_samples / exclusive_samples_per_s(colo, job.model, job.num_gpus)
        for preset in ({}, {"queue": "sd", "placement": "sd", "shares": "paced"}):
            res = simulate(colo, (job,), SimConfig(8, "sd-maxmin", **preset))
            (got,) = res.jobs
            assert got.sd == pytest.approx(1.0, abs=1e-3)
            assert got.jct_s == pytest.approx(alone, rel=1e-3)


def test_pairs_measured_unable_to_co_run_are_forbidden_both_ways():
    colo = load_colocation(COLO, "k80")
    for a, b in colo.forbidden:
        assert not colo.compatible(a, b) and not colo.compatible(b, a)
    assert colo.compatible("ResNet-18 (batch size 128)", "LM (batch size 20)")


def test_a_forbidden_pair_never_shares_a_gpu_in_any_configuration(tmp_path):
    a, b = "A3C", "CycleGAN"
    path = _file(tmp_path, {
        f"('{a}', 1)": {"null": 2.0, f"('{b}', 1)": [0.0, 0.0], f"('{a}', 1)": [1.0, 1.0]},
        f"('{b}', 1)": {"null": 1.0, f"('{a}', 1)": [0.0, 0.0], f"('{b}', 1)": [0.5, 0.5]},
    })
    colo = load_colocation(path, "t4")
    assert not colo.compatible(a, b)
    from gpufair.scheduler.sim.workload import TraceJob
    trace = tuple(TraceJob(f"j{i}", 10.0 * i, (a, b)[i % 2], 1, 8, 4000.0, i + 2)
                  for i in range(12))
    for levers in ({}, {"queue": "sd", "placement": "sd", "shares": "paced"},
                   {"placement": "packed"}, {"queue": "las", "shares": "paced"}):
        from gpufair.scheduler.sim.engine import Simulator
        sim = Simulator(colo, trace, SimConfig(2, "even", **levers))
        apply, seen = sim._apply, []

        def spy(plan, now, apply=apply, sim=sim, seen=seen):
            apply(plan, now)
            seen.extend({sim._jobs[n].trace.model for n in occ} for occ in sim._occ)

        sim._apply = spy
        assert len(sim.run().jobs) == 12
        assert seen and not any({a, b} <= models for models in seen)


def test_generated_traces_follow_gavels_distributions():
    colo = load_colocation(COLO, "p100")
    trace = gavel_trace(colo, 2000, 120.0, seed=1)
    types = gavel_job_types(colo)
    assert types and {j.model for j in trace} <= set(types)
    gpus = np.array([j.num_gpus for j in trace])
    for n, p in ((1, 0.70), (2, 0.10), (4, 0.15), (8, 0.05)):
        assert abs(np.mean(gpus == n) - p) < 0.03
    minutes = np.array([j.total_samples / exclusive_samples_per_s(colo, j.model, j.num_gpus)
                        for j in trace]) / 60
    assert minutes.min() >= 10 ** 1.5 * 0.999 and minutes.max() <= 1e4 * 1.001
    assert abs(np.mean(minutes >= 1000) - 0.2) < 0.04
    gaps = np.diff([j.arrival_s for j in trace])
    assert trace[0].arrival_s == 0 and abs(gaps.mean() / 120.0 - 1) < 0.1
    assert all(j.global_batch == colo.cost(j.model).profiled_batch * j.num_gpus for j in trace)
    assert gavel_trace(colo, 50, 120.0, seed=1) == trace[:50]
    assert gavel_trace(colo, 50, 120.0, seed=2) != trace[:50]
