"""Benchmark the split policies: simulated fairness/utilisation on the shared
job mixes, and decision time against cluster size.

    .venv/bin/python bench/scheduler/run_bench.py [--data ../shared/data]
        [--workloads 1,2] [--gpus 32] [--speedup 8] [--max-replicas 16] [--plots DIR]
        [--skip-sim] [--skip-timing] [--quick] [--repeat 5]

Ratios are against `even` measured in the same run. `sd-maxmin[rate]` is
sd-maxmin with `maxmin_objective="rate"` (equal normalised speeds now).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import time
from pathlib import Path

from gpufair.scheduler.policy import (ClusterState, JobState, PolicyConfig, RankState, decide,
                                      even_split, policy_names)
from gpufair.scheduler.sim import SimConfig, load_colocation, load_workload, simulate
from gpufair.scheduler.sim.plots import plot_runs


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


def variants() -> list[tuple[str, str, PolicyConfig]]:
    """(label, policy, config): every policy, plus sd-maxmin's rate objective."""
    out = [(p, p, PolicyConfig()) for p in policy_names()]
    return out + [("sd-maxmin[rate]", "sd-maxmin", PolicyConfig(maxmin_objective="rate"))]


def run_sims(args) -> None:
    colo_path = Path(args.data) / "colocation" / "gavel-physical-k80-p100.json"
    print(f"{'gpu':<4} {'wl':<3} {'mix':<9} {'policy':<15} {'max_sd':>7} {'mean_sd':>7} "
          f"{'maxRun':>7} {'meanRun':>7} {'util':>6} {'maxSD-':>7} {'maxRun-':>7} "
          f"{'util+':>6} {'/sdmm':>6}")
    for gpu_type in ("k80", "p100"):
        colo = load_colocation(colo_path, gpu_type)
        for w in args.workloads.split(","):
            trace = load_workload(Path(args.data) / "workloads" / f"adaptdl-workload-{w}.csv")
            for mix, jobs in mixes(trace, args.max_replicas, args.speedup, int(w)).items():
                results = {label: simulate(colo, jobs, SimConfig(args.gpus, p, seed=int(w),
                                                                 policy_config=cfg))
                           for label, p, cfg in variants()}
                summ = {label: r.summary() for label, r in results.items()}
                base, best = summ["even"], summ["sd-maxmin"]
                for p, s in summ.items():
                    print(f"{gpu_type:<4} {'w' + w:<3} {mix:<9} {p:<15} {s['max_sd']:>7.2f} "
                          f"{s['mean_sd']:>7.2f} {s['max_run_sd']:>7.2f} {s['mean_run_sd']:>7.2f} "
                          f"{s['gpu_util']:>6.1%} {1 - s['max_sd'] / base['max_sd']:>+7.1%} "
                          f"{1 - s['max_run_sd'] / base['max_run_sd']:>+7.1%} "
                          f"{s['gpu_util'] / base['gpu_util'] - 1:>+6.1%} "
                          f"{s['max_sd'] / best['max_sd']:>6.2f}")
                sys.stdout.flush()
                if args.plots:
                    Path(args.plots).mkdir(parents=True, exist_ok=True)
                    plot_runs(list(results.values())[:len(policy_names())],
                              Path(args.plots) / f"{gpu_type}-w{w}-{mix}.png")


def synthetic_cluster(n_jobs: int, n_gpus: int, seed: int) -> ClusterState:
    """Jobs of 1-8 GPUs on the least-loaded GPUs, random costs, measured rates."""
    rng = random.Random(seed)
    load = [0] * n_gpus
    jobs = []
    for j in range(n_jobs):
        n = rng.randint(1, 8)
        gpus = sorted(range(n_gpus), key=lambda g: (load[g], rng.random()))[:n]
        for g in gpus:
            load[g] += 1
        big_b = 32 * n * rng.choice([1, 2, 4])
        ranks = tuple(RankState(f"g{g}", b, rng.uniform(1e-3, 2e-2), rng.uniform(0, 0.05))
                      for g, b in zip(gpus, even_split(big_b, n)))
        jobs.append(JobState(f"j{j}", big_b, ranks, rng.uniform(0, 1e6), 2e6,
                             rng.uniform(0, 3600), rng.uniform(10, 1000), None))
    return ClusterState(tuple(jobs))


def run_timing(args) -> None:
    print(f"\n{'jobs':>5} {'gpus':>5} {'ranks':>6} "
          + " ".join(f"{label:>15}" for label, _, _ in variants())
          + f"   (ms per decision, best of {args.repeat}, one process)")
    sizes = [(30, 128), (250, 1024), (1000, 4096), (1000, 2048), (2000, 8192)]
    for n_jobs, n_gpus in sizes:
        cluster = synthetic_cluster(n_jobs, n_gpus, seed=n_jobs)
        cells = []
        for _, p, cfg in variants():
            best = float("inf")
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                decide(cluster, p, cfg)
                best = min(best, time.perf_counter() - t0)
            cells.append(f"{1000 * best:>15.1f}")
        ranks = sum(len(j.ranks) for j in cluster.jobs)
        print(f"{n_jobs:>5} {n_gpus:>5} {ranks:>6} " + " ".join(cells))
        sys.stdout.flush()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[3] / "shared" / "data"))
    ap.add_argument("--workloads", default="1,2,3,4")
    ap.add_argument("--gpus", type=int, default=32)
    ap.add_argument("--speedup", type=float, default=8.0, help="divide arrival times by this")
    ap.add_argument("--max-replicas", type=int, default=16)
    ap.add_argument("--plots", default=None, help="folder for PNG plots")
    ap.add_argument("--skip-sim", action="store_true")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--quick", action="store_true", help="workloads 1,2 only")
    ap.add_argument("--repeat", type=int, default=5, help="timing: best of this many decisions")
    args = ap.parse_args()
    if args.quick:
        args.workloads = "1,2"
    if not args.skip_timing:
        run_timing(args)
    if not args.skip_sim:
        run_sims(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
