"""The simulator: inputs, determinism, and what a run reports."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpufair.common.errors import InvalidArgument
from gpufair.scheduler.policy import policy_names
from gpufair.scheduler.sim import (SimConfig, Simulator, gpu_types, load_colocation,
                                   load_workload, parse_workload, simulate)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "scheduler"
COLO = FIX / "gavel-colocation-subset.json"
HEADER = "job,arrival_s,model,num_gpus,global_batch,total_samples\n"


@pytest.fixture(scope="module")
def k80():
    return load_colocation(COLO, "k80")


@pytest.fixture(scope="module")
def trace():
    return load_workload(FIX / "small-trace.csv")


def test_same_seed_same_run(k80, trace):
    for levers in ({}, {"queue": "sd", "placement": "sd", "shares": "paced"}):
        a = simulate(k80, trace, SimConfig(6, "sd-maxmin", seed=7, **levers)).summary()
        b = simulate(k80, trace, SimConfig(6, "sd-maxmin", seed=7, **levers)).summary()
        for timing in ("mean_decision_ms", "mean_round_ms"):
            a.pop(timing), b.pop(timing)
        assert a == b


def test_observer_sees_every_decision_and_changes_nothing(k80, trace):
    seen = []
    cfg = SimConfig(6, "sd-maxmin", seed=7)
    watched = Simulator(k80, trace, cfg, on_decision=lambda c, d: seen.append((c, d))).run()
    plain = simulate(k80, trace, cfg)
    assert len(seen) == watched.decisions > 0
    for cluster, decisions in seen:
        assert set(decisions) == {j.job for j in cluster.jobs}
    assert [j.jct_s for j in watched.jobs] == [j.jct_s for j in plain.jobs]


@pytest.mark.parametrize("policy", policy_names())
def test_every_job_finishes_no_faster_than_alone(k80, trace, policy):
    s = simulate(k80, trace, SimConfig(6, policy)).summary()
    assert {j["job"] for j in s["jobs"]} == {t.job for t in trace}
    assert all(j["sd"] >= 1 - 1e-6 and j["jct_s"] > 0 for j in s["jobs"])
    assert s["max_sd"] >= s["p95_sd"] >= 1 - 1e-6 and s["max_sd"] >= s["mean_sd"]
    assert 0 < s["gpu_util"] <= 1 and 0 < s["jain"] <= 1
    # Running-time slow-down leaves out the queue wait, never more than end to end.
    for j in s["jobs"]:
        assert 1 - 1e-6 <= j["run_sd"] <= j["sd"] + 1e-9 and j["wait_s"] >= 0
    assert s["max_run_sd"] <= s["max_sd"] + 1e-9
    for key in ("policy", "gpu_type", "num_gpus", "makespan_s"):
        assert key in s


def test_contention_raises_slowdown(k80, trace):
    roomy = simulate(k80, trace, SimConfig(32, "even")).summary()
    tight = simulate(k80, trace, SimConfig(4, "even")).summary()
    assert roomy["max_sd"] == pytest.approx(1.0, rel=1e-3)
    assert tight["max_sd"] > roomy["max_sd"]


def test_adaptdl_mix_is_accepted(k80):
    trace = load_workload(FIX / "adaptdl-workload-1-head.csv")
    assert trace[0].model == "ResNet-18 (batch size 128)"
    fast = tuple(dataclasses.replace(t, arrival_s=t.arrival_s / 20) for t in trace)
    s = simulate(k80, fast, SimConfig(32, "sd-maxmin")).summary()
    assert len(s["jobs"]) == len(trace)


@pytest.mark.parametrize("body,needle", [
    ("a,0,ResNet-18 (batch size 128),2,64,1000\nb,x,LM (batch size 20),1,20,10\n", ":3: arrival_s"),
    ("a,0,ResNet-18 (batch size 128),2,64,1000\nb,1,LM (batch size 20),1,20\n", ":3: expected 6"),
    ("a,0,ResNet-18 (batch size 128),4,2,1000\n", ":2: global batch"),
    ("a,0,ResNet-18 (batch size 128),0,2,1000\n", ":2: num_gpus"),
    ("a,0,ResNet-18 (batch size 128),1,2,1000\na,1,LM (batch size 20),1,20,5\n", ":3: job 'a'"),
    ("", "no jobs"),
])
def test_bad_rows_name_the_line(body, needle):
    with pytest.raises(InvalidArgument, match=needle):
        parse_workload(HEADER + body, "t.csv")


def _gavel_line(model, steps, gpus, arrival, mode=None):
    """One line of Gavel's trace format (`scheduler/utils.py` `parse_trace`)."""
    head = [model, "cd w && python3 main.py", "w", "--num_steps", "1", str(steps), str(gpus)]
    return "\t".join([*head, *([mode] if mode else []), "1", "-1", str(arrival)]) + "\n"


def test_a_gavel_trace_runs_each_job_for_its_steps_at_the_measured_speed(k80, tmp_path):
    # Alone on a roomy cluster, a job of N steps on G GPUs takes N / (the file's
    # steps/s for that model at G GPUs, counted over all ranks as Gavel counts
    # them): 7.231 at 1 GPU, 21.63 at 4 for ResNet-18 (batch size 64) on a K80.
    # Both Gavel layouts: with and without `mode`.
    path = tmp_path / "gavel.trace"
    path.write_text(_gavel_line("ResNet-18 (batch size 64)", 3000, 1, 0) +
                    _gavel_line("ResNet-18 (batch size 64)", 5000, 4, 7200.5, mode="static"))
    trace = load_workload(path)
    assert [(j.job, j.num_gpus, j.global_batch, j.total_samples, j.arrival_s) for j in trace] == \
        [("job0000", 1, 64, 3000 * 64, 0.0), ("job0001", 4, 256, 5000 * 64, 7200.5)]
    jct = {j.job: j.jct_s for j in simulate(k80, trace, SimConfig(32, "even")).jobs}
    assert jct["job0000"] == pytest.approx(3000 / 7.23126031032182, rel=1e-6)
    assert jct["job0001"] == pytest.approx(5000 / 21.625568416059814, rel=1e-6)


def test_a_gavel_trace_saved_on_windows_reads_the_same(tmp_path):
    # A byte-order mark, CRLF line ends and a stray tab after the arrival time.
    lines = [_gavel_line("ResNet-18 (batch size 64)", 3000, 1, 0),
             _gavel_line("LM (batch size 20)", 500, 2, 60)]
    plain, windows = tmp_path / "plain.trace", tmp_path / "windows.trace"
    plain.write_text("".join(lines))
    windows.write_bytes(b"\xef\xbb\xbf" + "".join(l.replace("\n", "\t\r\n") for l in lines).encode())
    assert load_workload(windows) == load_workload(plain)


@pytest.mark.parametrize("line,needle", [
    ("ResNet-18 (batch size 64)\tcmd\t5\t1\n", ":2: a Gavel trace line has 10 or 11"),
    (_gavel_line("ResNet-18 (batch size 64)", 100, 0, 5), ":2: scale_factor and total_steps"),
    (_gavel_line("ResNet-18 (batch size 64)", "many", 1, 5), ":2: total_steps 'many'"),
    (_gavel_line("ResNet-18 (batch size 64)", 100, 1, "soon"), ":2: arrival_time 'soon'"),
])
def test_bad_gavel_lines_name_the_line(line, needle):
    with pytest.raises(InvalidArgument, match=needle):
        parse_workload(_gavel_line("ResNet-18 (batch size 64)", 100, 1, 0) + line, "t.trace")


def test_bad_header_and_unknown_application():
    with pytest.raises(InvalidArgument, match="t.csv:1: header"):
        parse_workload("a,b\n1,2\n", "t.csv")
    with pytest.raises(InvalidArgument, match="t.csv:3: unknown application 'gpt'"):
        parse_workload("name,time,application,num_replicas,batch_size\n"
                       "x,1,cifar10,2,64\ny,2,gpt,1,8\n", "t.csv")


def test_unknown_model_and_oversized_job_name_the_line(k80):
    bad = parse_workload(HEADER + "a,0,ResNet-18 (batch size 128),1,64,10\n"
                         "b,0,AlexNet (batch size 1),1,1,10\n", "t.csv")
    with pytest.raises(InvalidArgument, match="line 3.*AlexNet"):
        simulate(k80, bad, SimConfig(4, "even"))
    big = parse_workload(HEADER + "a,0,ResNet-18 (batch size 128),8,64,10\n", "t.csv")
    with pytest.raises(InvalidArgument, match="line 2.*8 GPUs"):
        simulate(k80, big, SimConfig(4, "even"))


def test_unrunnable_models_are_unknown(k80):
    # ResNet-50 at batch 128 never ran alone on a K80 (isolated throughput 0).
    assert "ResNet-50 (batch size 128)" not in k80.costs
    with pytest.raises(InvalidArgument, match="'v100'.*k80, p100"):
        load_colocation(COLO, "v100")


def test_gpu_types_lists_what_a_file_measures(tmp_path):
    assert gpu_types(COLO) == ("k80", "p100")
    # Another vendor's file: types are whatever its top level names.
    other = tmp_path / "other.json"
    other.write_text('{"a100": {"(\'ResNet-18 (batch size 128)\', 1)": {"null": 9.5}}, '
                     '"notes": "measured 2026"}')
    assert gpu_types(other) == ("a100",)
    assert load_colocation(other, "a100").cost("ResNet-18 (batch size 128)").profiled_batch == 128
    other.write_text("[1, 2]")
    with pytest.raises(InvalidArgument, match="not a GPU type"):
        gpu_types(other)


def test_pairs_extend_to_more_neighbours(k80):
    m, n = "ResNet-18 (batch size 128)", "ResNet-50 (batch size 64)"
    pair = k80.efficiency(m, [n])
    assert k80.efficiency(m, []) == 1.0
    assert k80.efficiency(m, [n, n, n]) == pytest.approx(pair)
    assert 0.25 <= pair <= 1.0
