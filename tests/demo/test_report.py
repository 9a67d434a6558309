"""The demo's report: every run says its phase and preset; one table per phase."""

from __future__ import annotations

import json
from pathlib import Path

from gpufair.demo import report
from gpufair.demo.mix import RunResult


def _run(phase: str, preset: str, policy: str, sds: tuple[float, ...], util: float) -> RunResult:
    jobs = [{"job": f"j{i}", "sd": sd, "jct_s": 10.0 * sd} for i, sd in enumerate(sds)]
    series = [{"t": 1.0, "job": "j0", "sd": sds[0]}]
    return RunResult(policy, jobs, util, 0.01, 30.0, series, phase=phase, preset=preset)


def test_results_carry_phase_and_preset_and_the_table_compares_within_a_phase(tmp_path: Path) -> None:
    runs = [_run("layout", "k8s", "even", (2.0, 3.0), 0.4), _run("layout", "gpufair", "sd-maxmin", (1.5, 1.5), 0.6),
            _run("arrivals", "k8s", "k8s", (4.0, 1.1), 0.7), _run("arrivals", "gpufair", "gpufair", (1.2, 1.4), 0.7)]
    report.write_json(runs, tmp_path / "results.json")
    stored = json.loads((tmp_path / "results.json").read_text())["runs"]
    assert [(r["phase"], r["preset"]) for r in stored] == [("layout", "k8s"), ("layout", "gpufair"),
                                                            ("arrivals", "k8s"), ("arrivals", "gpufair")]
    assert stored[2]["max_sd"] == 4.0 and stored[3]["max_sd"] == 1.4
    text = report.table([r for r in runs if r.phase == "arrivals"])
    assert "gpufair vs k8s: max slow-down 65% lower, GPU utilisation +0.0 points (70.0% vs 70.0%)" in text
    # Job rows keep their columns whatever the JCT's digits (12.4 s and 3.1 s).
    short = [RunResult(p, [{"job": "long", "sd": 1.2, "jct_s": 12.4}, {"job": "short", "sd": 1.2, "jct_s": 3.1}], 0.7,
                       0.01, 30.0, [], phase="arrivals", preset=p) for p in ("k8s", "gpufair")]
    rows = [line for line in report.table(short).splitlines() if line.startswith(("long", "short"))]
    assert len({line.index("SD", 16) for line in rows}) == 1
    assert "GPU utilisation +20.0 points (60.0% vs 40.0%)" in report.table([r for r in runs if r.phase == "layout"])
    report.chart(runs, tmp_path / "slowdowns.png")
    assert (tmp_path / "slowdowns.png").stat().st_size > 10_000


def test_utilisation_counts_each_gpu_from_the_first_step_taken_on_it() -> None:
    from gpufair.demo.mix import utilisation

    # GPU 0 steps from t=10, GPU 1 from t=14 (a later job's start-up), GPU 2 never:
    # it counts from the first step anywhere. Everything ends at t=20.
    ranks = [{"device": 0, "start": 10.0, "end": 20.0}, {"device": 1, "start": 14.0, "end": 18.0},
             {"device": 0, "start": 12.0, "end": 19.0}]
    assert utilisation(12.0, ranks, 3) == 12.0 / (10.0 + 6.0 + 10.0)
    assert utilisation(0.0, ranks, 3) == 0.0
