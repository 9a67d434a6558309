"""Decision time of the split policies (the LP of `sd-maxmin` above all)
against cluster size: cold, and warm over a service's steady state.

    .venv/bin/python bench/scheduler/split_timing.py [--repeat 5] [--periods 10]

In the table, `sd-maxmin[plan]` is sd-maxmin without realising its plan
(`realise_evals=0`), and `warm median/max` are sd-maxmin's next `--periods`
decisions, one period apart (`next_period`: splits applied, progress,
re-measured costs, 1 % of jobs replaced), each starting from the last one's
LP bases, as the service and the simulator run it; `cold median` decides
the same clusters from scratch. The round planner's own decision time
(admission, placement, shares) is in `run_bench.py --timing`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from gpufair.scheduler.policy import PolicyConfig, WarmStart, decide, policy_names
from gpufair.scheduler.sim.synthetic import next_period, synthetic_cluster


def variants() -> list[tuple[str, str, PolicyConfig]]:
    """(label, policy, config): every policy, plus sd-maxmin's rate objective."""
    out = [(p, p, PolicyConfig()) for p in policy_names()]
    return out + [("sd-maxmin[rate]", "sd-maxmin", PolicyConfig(maxmin_objective="rate"))]


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
    ap.add_argument("--repeat", type=int, default=5, help="cold: best of this many decisions")
    ap.add_argument("--periods", type=int, default=10,
                    help="warm decisions, one period apart, after the cold one")
    run_timing(ap.parse_args())
    return 0


if __name__ == "__main__":
    sys.exit(main())
