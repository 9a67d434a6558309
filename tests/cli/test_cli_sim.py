"""`gpufair sim` as scripts use it: flags, JSON keys, exit codes, plots."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gpufair.client.cli import sim

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "scheduler"


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpufair")
    sim.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def base(policy: str = "sd-maxmin") -> list[str]:
    return ["sim", "--colocation", str(FIX / "gavel-colocation-subset.json"), "--gpu-type",
            "p100", "--gpus", "6", "--policy", policy, "--workload", str(FIX / "small-trace.csv")]


def test_json_summary_has_the_contract_keys(capsys):
    assert run(base() + ["--json", "--seed", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("policy", "gpu_type", "num_gpus", "max_sd", "mean_sd", "p95_sd", "jain",
                "gpu_util", "makespan_s", "jobs"):
        assert key in out
    assert out["policy"] == "sd-maxmin" and out["num_gpus"] == 6
    assert {"job", "sd", "jct_s"} <= set(out["jobs"][0])


def test_table_compare_and_plot(capsys, tmp_path):
    png = tmp_path / "cmp.png"
    assert run(base("even") + ["--compare", "even,balance,sd-maxmin", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "balance" in out and "sd-maxmin" in out and out.count("even") >= 1
    head, *rows = out.splitlines()[1:5]
    assert head.split()[-3:] == ["gpu_util", "goodput", "makespan_s"]
    # Goodput counts only useful work, so it never exceeds the busy time.
    assert len(rows) == 3 and all(float(r.split()[-2][:-1]) <= float(r.split()[-3][:-1]) + 0.05 for r in rows)
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path):
    bad = tmp_path / "w.csv"
    bad.write_text("job,arrival_s,model,num_gpus,global_batch,total_samples\n"
                   "a,0,Nope (batch size 3),1,3,10\n")
    argv = base()
    argv[argv.index("--workload") + 1] = str(bad)
    assert run(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "line 2" in err and "Nope" in err and "\n" not in err
    assert run(base("fastest")) == 2


def test_presets_and_lever_flags(capsys):
    argv = base() + ["--json", "--seed", "1"]
    argv.remove("--policy"), argv.remove("sd-maxmin")
    assert run(argv + ["--preset", "gpufair", "--compare", "k8s,even"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["queue"], out["placement"], out["shares"], out["policy"]) == \
        ("sd", "sd", "paced", "sd-maxmin")
    for key in ("mean_jct_s", "p99_wait_s", "rho_max", "rho_median", "goodput"):
        assert key in out
    k8s, even = out["compare"]
    assert (k8s["label"], k8s["queue"], k8s["shares"], k8s["policy"]) == \
        ("k8s", "fifo", "time-slicing", "even")
    # A compared split policy keeps the main run's other levers.
    assert (even["label"], even["queue"], even["shares"]) == ("even", "sd", "paced")
    # Explicit flags override the preset's parts.
    assert run(argv + ["--preset", "gpufair", "--shares", "time-slicing"]) == 0
    assert json.loads(capsys.readouterr().out)["shares"] == "time-slicing"


def test_strict_fifo_queue_runs_from_the_cli(capsys):
    argv = base("even") + ["--json", "--queue", "fifo-strict", "--max-per-gpu", "1"]
    assert run(argv) == 0
    strict = json.loads(capsys.readouterr().out)
    assert (strict["queue"], strict["placement"], strict["shares"]) == \
        ("fifo-strict", "least-loaded", "time-slicing")
    rows = (FIX / "small-trace.csv").read_text().splitlines()[1:]
    arrival = {r.split(",")[0]: float(r.split(",")[1]) for r in rows}
    assert len(strict["jobs"]) == len(rows) and all(j["sd"] >= 1 - 1e-9 for j in strict["jobs"])
    # Nobody starts before a job that arrived earlier; plain FIFO lets some pass.
    assert run(base("even") + ["--json", "--max-per-gpu", "1"]) == 0
    loose = json.loads(capsys.readouterr().out)

    def starts(summary: dict) -> list[float]:
        by_arrival = sorted(summary["jobs"], key=lambda j: (arrival[j["job"]], j["job"]))
        return [arrival[j["job"]] + j["wait_s"] for j in by_arrival]

    assert starts(strict) == sorted(starts(strict)) and starts(loose) != sorted(starts(loose))


def test_lever_errors_are_one_line_and_exit_2(capsys):
    argv = base()
    argv.remove("--policy"), argv.remove("sd-maxmin")
    for extra, needle in ((["--preset", "slurm"], "unknown preset 'slurm'"),
                          ([], "give --policy or --preset"),
                          (["--preset", "k8s", "--queue", "lifo"], "unknown queue 'lifo'"),
                          (["--preset", "k8s", "--shares", "mps"], "unknown shares 'mps'"),
                          (["--preset", "k8s", "--compare", "nonsense"],
                           "not a split policy (even, balance, sd-feedback, sd-maxmin) or a preset (k8s, gpufair)"),
                          (["--preset", "k8s", "--gpus", "0"], "--gpus must be at least 1, got 0"),
                          (["--preset", "k8s", "--period", "0"], "--period must be a positive"),
                          (["--preset", "k8s", "--max-per-gpu", "0"], "--max-per-gpu must be at least 1")):
        assert run(argv + extra) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and "\n" not in err


def test_generate_writes_a_trace_the_simulator_reads(capsys, tmp_path):
    out = tmp_path / "trace.csv"
    gen = ["sim", "--colocation", str(FIX / "gavel-colocation-subset.json"), "--gpu-type",
           "k80", "--generate", "gavel", "--jobs", "30", "--interarrival", "120", "--seed",
           "5", "--out", str(out)]
    assert run(gen) == 0
    assert "30 jobs on k80" in capsys.readouterr().out
    first = out.read_text()
    assert first.splitlines()[0] == "job,arrival_s,model,num_gpus,global_batch,total_samples"
    assert len(first.splitlines()) == 31
    assert run(gen) == 0 and out.read_text() == first  # seeded
    capsys.readouterr()
    sim_argv = ["sim", "--colocation", str(FIX / "gavel-colocation-subset.json"),
                "--gpu-type", "k80", "--gpus", "16", "--preset", "gpufair", "--workload",
                str(out), "--json"]
    assert run(sim_argv) == 0
    assert len(json.loads(capsys.readouterr().out)["jobs"]) == 30


def test_generate_errors_lose_nothing(capsys, tmp_path):
    out = tmp_path / "trace.csv"
    out.write_text("keep me\n")
    gen = ["sim", "--colocation", str(FIX / "gavel-colocation-subset.json"), "--gpu-type",
           "k80", "--generate", "gavel", "--interarrival", "120", "--out", str(out)]
    assert run(gen) == 2 and "--jobs" in capsys.readouterr().err
    assert run(gen + ["--jobs", "0"]) == 2 and "jobs >= 1" in capsys.readouterr().err
    assert run(gen[:6] + ["pareto"] + gen[7:] + ["--jobs", "3"]) == 2
    assert "unknown generator 'pareto'" in capsys.readouterr().err
    assert out.read_text() == "keep me\n"
    assert run(gen + ["--jobs", "3", "--out", str(tmp_path / "missing" / "t.csv")]) == 1
    assert "cannot write" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [out]
