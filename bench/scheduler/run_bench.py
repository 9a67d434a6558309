"""Benchmark the split policies: simulated fairness/utilisation on the shared
job mixes, and decision time against cluster size.

    .venv/bin/python bench/scheduler/run_bench.py [--data ../shared/data]
        [--colocation FILE] [--gpu-types k80,p100] [--workloads 1,2,my-mix.csv]
        [--placements least-loaded,packed,random] [--gpus 32]
        [--speedup 8] [--max-replicas 16] [--plots DIR] [--no-rate]
        [--skip-sim] [--skip-timing] [--quick] [--repeat 5] [--periods 10]

Ratios are against `even` measured in the same run under the same placement.
Every GPU type in the co-location file is simulated unless `--gpu-types`
names some; a workload is N (`<data>/workloads/adaptdl-workload-N.csv`) or a
trace file in either format `gpufair sim` reads.
`sd-maxmin[rate]` (skipped with --no-rate) is sd-maxmin with
`maxmin_objective="rate"` (equal normalised speeds now); in the timing table,
`sd-maxmin[plan]` is sd-maxmin without realising its plan (`realise_evals=0`),
and `warm median/max` are sd-maxmin's next `--periods` decisions, one period
apart (`next_period`: splits applied, progress, re-measured costs, 1 % of
jobs replaced), each starting from the last one's LP bases, as the service
and the simulator run it; `cold median` decides the same clusters from scratch.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from gpufair.common.errors import GpufairError, InvalidArgument
from gpufair.scheduler.policy import (PolicyConfig, WarmStart, decide, even_split,
                                      policy_names, solve_maxmin)
from gpufair.scheduler.policy.components import find_components
from gpufair.scheduler.policy.realise import badness
from gpufair.scheduler.sim import (SimConfig, Simulator, check_placement, gpu_types,
                                   load_colocation, load_workload, placement_names, simulate)
from gpufair.scheduler.sim.plots import plot_runs
from gpufair.scheduler.sim.synthetic import next_period, synthetic_cluster


def mixes(trace, max_replicas: int, speedup: float, seed: int):
    """Two mixes from one trace: mostly multi-GPU (every multi-GPU job, 1 in 4
    single-GPU jobs) and mostly single-GPU (the reverse)."""
    rng = random.Random(seed)
    jobs = [dataclasses.replace(j, num_gpus=min(j.num_gpus, max_replicas),
                                arrival_s=j.arrival_s / speedup) for j in trace]
    keep = {j.job: rng.random() < 0.25 for j in jobs}
    multi = tuple(j for j in jobs if j.num_gpus > 1 or keep[j.job])
    single = tuple(j for j in jobs if j.num_gpus == 1 or keep[j.job])
    return {"multi-GPU": multi, "1-GPU": single}


def traces(args) -> list[tuple[str, int, tuple]]:
    """(label, seed, trace) per `--workloads` entry: N names the shared
    AdaptDL mix N ("wN", seed N), anything else a trace file (its name, seed
    = its position). All read before any simulation, so a bad file fails fast."""
    out = []
    for pos, item in enumerate(args.workloads.split(","), 1):
        if item.isdigit():
            path = Path(args.data) / "workloads" / f"adaptdl-workload-{item}.csv"
            out.append((f"w{item}", int(item), load_workload(path)))
        else:
            out.append((Path(item).stem, pos, load_workload(item)))
    labels = [label for label, _, _ in out]
    if len(set(labels)) != len(labels):
        raise InvalidArgument(f"--workloads: two traces share a name ({', '.join(labels)})")
    return out


def colocations(args) -> list[tuple[str, object]]:
    """(GPU type, model) per type `--gpu-types` names, default every type in the file."""
    path = args.colocation or Path(args.data) / "colocation" / "gavel-physical-k80-p100.json"
    names = args.gpu_types.split(",") if args.gpu_types else gpu_types(path)
    return [(gpu_type, load_colocation(path, gpu_type)) for gpu_type in names]


def variants(with_rate: bool = True) -> list[tuple[str, str, PolicyConfig]]:
    """(label, policy, config): every policy, plus sd-maxmin's rate objective."""
    out = [(p, p, PolicyConfig()) for p in policy_names()]
    rate = [("sd-maxmin[rate]", "sd-maxmin", PolicyConfig(maxmin_objective="rate"))]
    return out + rate if with_rate else out


HEAD = (f"{'place':<12} {'gpu':<4} {'wl':<3} {'mix':<9} {'policy':<15} {'max_sd':>7} "
        f"{'mean_sd':>7} {'maxRun':>7} {'meanRun':>7} {'util':>6} {'maxSD-':>7} {'maxRun-':>7} "
        f"{'util+':>6} {'/sdmm':>6}")


def row(key: tuple[str, str, str, str], label: str, s: dict, base: dict, best: dict) -> str:
    """One table line: absolute figures, then ratios against `even` and sd-maxmin."""
    place, gpu_type, w, mix = key
    return (f"{place:<12} {gpu_type:<4} {w:<3} {mix:<9} {label:<15} {s['max_sd']:>7.2f} "
            f"{s['mean_sd']:>7.2f} {s['max_run_sd']:>7.2f} {s['mean_run_sd']:>7.2f} "
            f"{s['gpu_util']:>6.1%} {1 - s['max_sd'] / base['max_sd']:>+7.1%} "
            f"{1 - s['max_run_sd'] / base['max_run_sd']:>+7.1%} "
            f"{s['gpu_util'] / base['gpu_util'] - 1:>+6.1%} {s['max_sd'] / best['max_sd']:>6.2f}")


def worst_job(summary: dict) -> tuple[int, float]:
    """The worst (largest SD) job's GPU count and the share of its JCT spent queued."""
    job = max(summary["jobs"], key=lambda j: j["sd"])
    return job["num_gpus"], job["wait_s"] / job["jct_s"]


def verdicts(cells: dict[tuple[str, str, str, str], dict[str, dict]]) -> None:
    """Per placement: where sd-maxmin meets the issue's targets against `even`
    (>= 60 % max-SD cut, >= +25 % utilisation) on contended cells (even's util >= 50 %),
    next to how often a multi-GPU job's GPUs were unevenly shared under `even` and what
    `even`'s worst job was (GPUs, share of its time spent queued)."""
    print(f"\nsd-maxmin vs even (targets: maxSD- >= 60 %, util+ >= 25 %; contended = even util"
          f" >= 50 %)\n{'place':<12} {'gpu':<4} {'wl':<3} {'mix':<9} {'evenUtil':>8} "
          f"{'uneven':>6} {'wGPUs':>5} {'wWait':>5} {'maxSD-':>7} {'maxRun-':>7} {'util+':>6}  verdict")
    for (place, gpu_type, w, mix), summ in cells.items():
        base, sd = summ["even"], summ["sd-maxmin"]
        cut, run_cut = 1 - sd["max_sd"] / base["max_sd"], 1 - sd["max_run_sd"] / base["max_run_sd"]
        gain = sd["gpu_util"] / base["gpu_util"] - 1
        w_gpus, w_wait = worst_job(base)
        if base["gpu_util"] < 0.5:
            verdict = "uncontended"
        else:
            verdict = " ".join(["SD:met" if cut >= 0.6 else "SD:no",
                                "util:met" if gain >= 0.25 else "util:no"])
        print(f"{place:<12} {gpu_type:<4} {w:<3} {mix:<9} {base['gpu_util']:>8.1%} "
              f"{base['uneven_share']:>6.0%} {w_gpus:>5} {w_wait:>5.0%} {cut:>+7.1%} {run_cut:>+7.1%} {gain:>+6.1%}  "
              f"{verdict}")


def placement_summary(cells: dict[tuple[str, str, str, str], dict[str, dict]]) -> None:
    """Per placement, over its contended cells: how often and by how much
    sd-maxmin beats even on max SD, its utilisation change, and `uneven`."""
    print(f"\nsummary over contended cells\n{'placement':<12} {'cells':>5}  {'beats even':>10}"
          f" {'mean maxSD-':>11} {'range of maxSD-':>20} {'mean util+':>10} {'best util+':>10}"
          f" {'mean uneven':>11}")
    for place in dict.fromkeys(key[0] for key in cells):
        rows = [(1 - c["sd-maxmin"]["max_sd"] / c["even"]["max_sd"],
                 c["sd-maxmin"]["gpu_util"] / c["even"]["gpu_util"] - 1, c["even"]["uneven_share"])
                for key, c in cells.items() if key[0] == place and c["even"]["gpu_util"] >= 0.5]
        if not rows:
            continue
        cut, gain, uneven = (np.array(col) for col in zip(*rows))
        print(f"{place:<12} {len(rows):>5}  {f'{(cut > 0).sum()} / {len(rows)}':>10}"
              f" {cut.mean():>+11.1%} {f'{cut.min():+.1%} .. {cut.max():+.1%}':>20}"
              f" {gain.mean():>+10.1%} {gain.max():>+10.1%} {uneven.mean():>11.0%}")


def run_sims(args) -> None:
    """Every placement x GPU type x workload x mix x policy; ratios per cell."""
    cells: dict[tuple[str, str, str, str], dict[str, dict]] = {}
    print(HEAD)
    for place in args.placements.split(","):
        for gpu_type, colo in args.colocations:
            for w, seed, trace in args.traces:
                for mix, jobs in mixes(trace, args.max_replicas, args.speedup, seed).items():
                    results = {label: simulate(colo, jobs, SimConfig(
                        args.gpus, p, seed=seed, placement=place, policy_config=cfg))
                        for label, p, cfg in variants(args.with_rate)}
                    summ = {label: r.summary() for label, r in results.items()}
                    key = (place, gpu_type, w, mix)
                    cells[key] = summ
                    for label, s in summ.items():
                        print(row(key, label, s, summ["even"], summ["sd-maxmin"]))
                    sys.stdout.flush()
                    if args.plots:
                        Path(args.plots).mkdir(parents=True, exist_ok=True)
                        plot_runs(list(results.values())[:len(policy_names())],
                                  Path(args.plots) / f"{place}-{gpu_type}-{w}-{mix}.png")
    verdicts(cells)
    placement_summary(cells)


def run_decisions(args) -> None:
    """Per decision, what time-slicing makes of each choice of splits.

    Runs sd-maxmin over every cell (first placement rule only) and, at each
    decision where some multi-GPU job shares a GPU, scores with the model the
    even split, the LP's proportions rounded (realise_evals=0), the realised
    splits (the policy's choice), against the LP bound. Ratios of the largest
    predicted SD, averaged over those decisions."""
    place = args.placements.split(",")[0]
    print(f"\nper decision, max predicted SD under time-slicing ({place}; means over decisions "
          f"where a multi-GPU job shares a GPU)\n{'gpu':<4} {'wl':<3} {'mix':<9} {'n':>5} "
          f"{'plan/even':>9} {'real/even':>9} {'real<even':>9} {'real>even':>9} {'real/bound':>10}")
    for gpu_type, colo in args.colocations:
        for w, seed, trace in args.traces:
            for mix, jobs in mixes(trace, args.max_replicas, args.speedup, seed).items():
                rows = []

                def score(cluster, decisions, rows=rows):
                    if not find_components(cluster).general:
                        return
                    plan = decide(cluster, "sd-maxmin", PolicyConfig(realise_evals=0))
                    sd = {name: badness(cluster.jobs, [d[j.job].split for j in cluster.jobs],
                                        "sd")[0].max()
                          for name, d in (("plan", plan), ("real", decisions))}
                    even = [even_split(j.global_batch, len(j.ranks)) for j in cluster.jobs]
                    sd["even"] = badness(cluster.jobs, even, "sd")[0].max()
                    rows.append((sd["plan"] / sd["even"], sd["real"] / sd["even"],
                                 sd["real"] / solve_maxmin(cluster).max_sd))

                Simulator(colo, jobs, SimConfig(args.gpus, "sd-maxmin", seed=seed, placement=place),
                          on_decision=score).run()
                if not rows:
                    print(f"{gpu_type:<4} {w:<3} {mix:<9} {0:>5}  (nothing shared)")
                    continue
                plan, real, gap = (sum(c) / len(rows) for c in zip(*rows))
                better = sum(r[1] < 0.99 for r in rows) / len(rows)
                worse = sum(r[1] > 1.01 for r in rows) / len(rows)
                print(f"{gpu_type:<4} {w:<3} {mix:<9} {len(rows):>5} {plan:>9.3f} {real:>9.3f} "
                      f"{better:>9.0%} {worse:>9.0%} {gap:>10.3f}")
                sys.stdout.flush()


# (jobs, GPUs, job widths, node size): None places jobs on any GPUs (the
# job-GPU graph is one random expander, the LP's worst case); 8 keeps each
# job inside an 8-GPU node. The last rows make every job 8 GPUs wide, ~2 jobs
# per GPU at 4,096 GPUs.
TIMING_SIZES = [(30, 128, (1, 8), None), (250, 1024, (1, 8), None), (1000, 4096, (1, 8), None),
                (1000, 2048, (1, 8), None), (2000, 8192, (1, 8), None),
                (1000, 4096, (8, 8), None), (1000, 4096, (1, 8), 8), (1000, 2048, (1, 8), 8),
                (1000, 4096, (8, 8), 8)]


def run_timing(args) -> None:
    timed = variants() + [("sd-maxmin[plan]", "sd-maxmin", PolicyConfig(realise_evals=0))]
    print(f"\n{'jobs':>5} {'gpus':>5} {'node':>4} {'ranks':>6} "
          + " ".join(f"{label:>15}" for label, _, _ in timed)
          + f" {'warm median/max':>16} {'cold median':>11}"
          + "  LP pivots level/throughput: cold, warm median"
          + f"   (ms per decision; cold: best of {args.repeat}; warm: {args.periods} periods)")
    for n_jobs, n_gpus, widths, node in TIMING_SIZES:
        cluster = synthetic_cluster(n_jobs, n_gpus, seed=n_jobs, widths=widths, node=node)
        cells = []
        for _, p, cfg in timed:
            best = float("inf")
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                decide(cluster, p, cfg)
                best = min(best, time.perf_counter() - t0)
            cells.append(f"{1000 * best:>15.1f}")
        # Warm: the service's steady state, one decision per period, each
        # starting from the last one's LP bases (the first one is cold).
        warm, later = WarmStart(), cluster
        decisions = decide(cluster, "sd-maxmin", None, warm)
        cold = dict(warm.pivots)
        times, colds, pivots = [], [], {"level": [], "throughput": []}
        for period in range(args.periods):
            later = next_period(later, decisions, n_gpus, seed=period, widths=widths, node=node)
            t0 = time.perf_counter()
            decisions = decide(later, "sd-maxmin", None, warm)
            times.append(1000 * (time.perf_counter() - t0))
            for k in pivots:
                pivots[k].append(warm.pivots.get(k, 0))
            t0 = time.perf_counter()
            decide(later, "sd-maxmin")  # the same decision cold, for comparison
            colds.append(1000 * (time.perf_counter() - t0))
        cells.append(f"{statistics.median(times):>9.1f}/{max(times):<6.1f}"
                     f" {statistics.median(colds):>11.1f}")
        ranks = sum(len(j.ranks) for j in cluster.jobs)
        counts = "/".join(f"{cold.get(k, 0)}, {statistics.median(v):.0f}"
                          for k, v in pivots.items())
        print(f"{n_jobs:>5} {n_gpus:>5} {node or 'any':>4} {ranks:>6} " + " ".join(cells)
              + f"  {counts}")
        sys.stdout.flush()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[3] / "shared" / "data"))
    ap.add_argument("--colocation", default=None,
                    help="Gavel-format co-location JSON (default: the shared k80/p100 file)")
    ap.add_argument("--gpu-types", default=None,
                    help="GPU types to simulate, comma-separated (default: every type in the file)")
    ap.add_argument("--workloads", default="1,2,3,4",
                    help="AdaptDL mix numbers and/or trace files, comma-separated")
    ap.add_argument("--gpus", type=int, default=32)
    ap.add_argument("--speedup", type=float, default=8.0, help="divide arrival times by this")
    ap.add_argument("--max-replicas", type=int, default=16)
    ap.add_argument("--placements", default=",".join(placement_names()),
                    help="placement rules to compare under (default: all)")
    ap.add_argument("--no-rate", dest="with_rate", action="store_false",
                    help="skip sd-maxmin with the rate objective (saves ~20 %% of sim time)")
    ap.add_argument("--plots", default=None, help="folder for PNG plots")
    ap.add_argument("--skip-sim", action="store_true")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--skip-decisions", action="store_true",
                    help="skip scoring each sd-maxmin decision against even and the LP bound")
    ap.add_argument("--quick", action="store_true", help="workloads 1,2 only")
    ap.add_argument("--repeat", type=int, default=5, help="timing: best of this many decisions")
    ap.add_argument("--periods", type=int, default=10,
                    help="timing: warm decisions, one period apart, after the cold one")
    args = ap.parse_args()
    if args.quick:
        args.workloads = "1,2"
    for place in args.placements.split(","):
        try:
            check_placement(place)
        except InvalidArgument as e:
            ap.error(str(e))
    if not (args.skip_sim and args.skip_decisions):
        args.colocations, args.traces = colocations(args), traces(args)
    if not args.skip_timing:
        run_timing(args)
    if not args.skip_sim:
        run_sims(args)
    if not args.skip_decisions:
        run_decisions(args)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except GpufairError as exc:  # bad input files: one line, not a traceback
        print(f"run_bench: {exc}", file=sys.stderr)
        sys.exit(2)
