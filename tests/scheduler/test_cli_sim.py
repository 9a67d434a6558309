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
