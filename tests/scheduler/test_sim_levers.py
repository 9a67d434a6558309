"""The simulator under the scheduler's levers: presets, paced shares,
starvation, and the figures scripts depend on."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gpufair.scheduler.policy.fleet import PRESETS
from gpufair.scheduler.policy.priority import WIDE_CAP
from gpufair.scheduler.sim import SimConfig, Simulator, load_colocation, load_workload, simulate
from gpufair.scheduler.sim.workload import TraceJob

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "scheduler"
GPUFAIR = {"queue": "sd", "placement": "sd", "shares": "paced"}


@pytest.fixture(scope="module")
def p100():
    return load_colocation(FIX / "gavel-colocation-subset.json", "p100")


def _stream(model: str, big_samples: float) -> tuple[TraceJob, ...]:
    """Four 1-GPU jobs of staggered lengths hold every GPU, a 4-GPU job
    arrives early, and 1-GPU jobs keep arriving, enough to take each GPU as
    soon as it frees: the GPUs are never all free at once."""
    jobs = [TraceJob(f"warm{i}", 0.0, model, 1, 64, 6e4 * (i + 1), i + 2) for i in range(4)]
    jobs.append(TraceJob("big", 5.0, model, 4, 256, big_samples, 6))
    jobs += [TraceJob(f"s{i:03d}", 10.0 + 40.0 * i, model, 1, 64, 1.8e5, 7 + i)
             for i in range(120)]
    return tuple(jobs)


def test_a_wide_job_is_not_starved_by_a_stream_of_small_ones(p100):
    trace = _stream("ResNet-18 (batch size 64)", 4e5)
    fifo = simulate(p100, trace, SimConfig(4, "even", max_per_gpu=1)).summary()
    fair = simulate(p100, trace, SimConfig(4, "sd-maxmin", max_per_gpu=1, **GPUFAIR)).summary()
    waits = {s["policy"]: next(j for j in s["jobs"] if j["job"] == "big") for s in (fifo, fair)}
    # FIFO with greedy backfill starts the wide job only when the stream dries up; the
    # reservation starts it once it is at risk, and its SD stays near the others'.
    assert waits["even"]["wait_s"] > 3 * waits["sd-maxmin"]["wait_s"]
    assert waits["sd-maxmin"]["sd"] <= fair["max_sd"] and fair["max_sd"] < fifo["max_sd"]


def test_a_wide_job_that_can_share_with_none_of_the_stream_is_not_starved(tmp_path):
    # The stream's model and the wide job's were measured unable to share a GPU
    # ([0, 0]): the wide job can only start on GPUs the stream has left, and
    # its reservation must hold GPUs that do not suit it yet, or the stream
    # keeps taking them.
    pair = {"null": 10.0, "('a', 1)": [6.0, 6.0], "('b', 1)": [6.0, 6.0]}
    path = tmp_path / "colocation.json"
    path.write_text(json.dumps({"t": {"('a', 1)": {**pair, "('b', 1)": [0.0, 0.0]},
                                      "('b', 1)": {**pair, "('a', 1)": [0.0, 0.0]}}}))
    colo = load_colocation(path, "t")
    trace = tuple(replace(j, model="b") if j.job == "big" else j for j in _stream("a", 4e5))
    fair = simulate(colo, trace, SimConfig(4, "sd-maxmin", **GPUFAIR))
    big = next(j.sd for j in fair.jobs if j.job == "big")
    assert big <= WIDE_CAP * max(j.sd for j in fair.jobs if j.job != "big")


def test_paced_shares_never_oversubscribe_a_gpu_and_the_most_urgent_job_runs(p100):
    trace = load_workload(FIX / "small-trace.csv")
    sim = Simulator(p100, trace, SimConfig(4, "sd-maxmin", seed=2, **GPUFAIR))
    apply, checked = sim._apply, [0]

    def spy(plan, now):
        apply(plan, now)
        used = [0.0] * 4
        for job in sim._jobs.values():
            for g, s in zip(job.gpus, job.shares):
                used[g] += s
            if job.gpus:
                assert sum(job.split) == job.trace.global_batch and min(job.split) >= 1
        assert max(used) <= 1 + 1e-9
        checked[0] += 1

    sim._apply = spy
    result = sim.run()
    assert checked[0] > 5 and len(result.jobs) == len(trace)
    assert all(j.sd >= 1 - 1e-6 for j in result.jobs)


def test_the_k8s_preset_is_the_old_default_and_gpufair_every_lever(p100):
    k8s, fair = PRESETS["k8s"], PRESETS["gpufair"]
    assert (k8s.queue, k8s.placement, k8s.shares, k8s.split) == \
        ("fifo", "least-loaded", "time-slicing", "even")
    assert (fair.queue, fair.placement, fair.shares) == ("sd", "sd", "paced")
    default = SimConfig(6, "even")
    assert (default.queue, default.placement, default.shares) == \
        (k8s.queue, k8s.placement, k8s.shares)


def test_summary_has_the_new_keys_and_they_add_up(p100):
    trace = load_workload(FIX / "small-trace.csv")
    s = simulate(p100, trace, SimConfig(4, "sd-maxmin", **GPUFAIR)).summary()
    jobs = s["jobs"]
    assert s["mean_jct_s"] == pytest.approx(sum(j["jct_s"] for j in jobs) / len(jobs))
    assert s["p99_wait_s"] <= max(j["wait_s"] for j in jobs) + 1e-9
    assert s["rho_max"] >= s["rho_median"] > 0
    assert 0 < s["goodput"] <= s["gpu_util"] + 1e-9 <= 1 + 1e-9
    assert (s["queue"], s["placement"], s["shares"]) == ("sd", "sd", "paced")


@pytest.mark.parametrize("levers", [PRESETS["k8s"], PRESETS["gpufair"]], ids=["k8s", "gpufair"])
def test_idle_gpu_time_by_kind_is_what_is_not_busy(p100, levers):
    trace = load_workload(FIX / "small-trace.csv")
    s = simulate(p100, trace, SimConfig(4, levers.split, queue=levers.queue,
                                        placement=levers.placement, shares=levers.shares)).summary()
    assert set(s["idle"]) == {"no_work", "waiting", "held", "partial"}
    assert min(s["idle"].values()) >= 0
    assert sum(s["idle"].values()) == pytest.approx(1 - s["gpu_util"], abs=1e-9)


def test_a_gpu_left_empty_while_a_wide_job_waits_counts_as_waiting(p100):
    # A long 1-GPU job holds GPU 0; a 2-GPU job arriving next waits for it
    # (nothing may stack on a GPU: at most one job each), so GPU 1 idles with
    # a job waiting until the first is done; then both run and nothing idles.
    model = "ResNet-18 (batch size 64)"
    trace = (TraceJob("long", 0.0, model, 1, 64, 2e5, 2), TraceJob("wide", 1.0, model, 2, 128, 2e5, 3))
    r = simulate(p100, trace, SimConfig(2, "even", max_per_gpu=1, **GPUFAIR))
    first = next(j for j in r.jobs if j.job == "long")
    wide = next(j for j in r.jobs if j.job == "wide")
    assert wide.start_s == pytest.approx(first.finish_s)
    idle = r.idle_by_kind()
    # GPU 1 is empty from t=0 to the first finish: 1 s with nothing waiting, the rest waiting.
    assert idle["waiting"] * 2 * r.makespan_s == pytest.approx(first.finish_s - 1.0, rel=1e-6)
    assert idle["no_work"] * 2 * r.makespan_s == pytest.approx(1.0, rel=1e-6)
    assert idle["held"] == 0
