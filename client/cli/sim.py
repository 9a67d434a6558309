"""`gpufair sim`: run split policies over a job trace on a simulated cluster."""

from __future__ import annotations

import argparse
import json
import sys

from gpufair.common.errors import GpufairError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `sim` subcommand."""
    p = subparsers.add_parser(
        "sim", help="simulate split policies over a job trace",
        description="Trace-driven simulation of a shared GPU cluster under a split policy.")
    p.add_argument("--colocation", required=True, help="Gavel-format co-location JSON")
    p.add_argument("--gpu-type", required=True, help="GPU type in that file, e.g. k80")
    p.add_argument("--gpus", type=int, required=True, help="number of GPUs in the cluster")
    p.add_argument("--policy", required=True, help="even, balance, sd-feedback or sd-maxmin")
    p.add_argument("--workload", required=True, help="trace CSV (gpufair or AdaptDL format)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the placement's random draws (default 0)")
    p.add_argument("--placement", default="least-loaded", metavar="NAME",
                   help="where arriving jobs go, the same for every compared policy: "
                        "least-loaded (default; fewest jobs first, seeded ties), packed "
                        "(first fit on the lowest-numbered GPUs with room) or random (seeded)")
    p.add_argument("--json", action="store_true", help="print the JSON summary")
    p.add_argument("--plot", metavar="OUT.png", help="write SD and utilisation plots")
    p.add_argument("--compare", metavar="P1,P2,...",
                   help="also run these policies (same placement) for the table and plot")
    p.add_argument("--period", type=float, default=60.0, help="policy period, s (default 60)")
    p.add_argument("--max-per-gpu", type=int, default=4, help="jobs per GPU at most (default 4)")
    p.set_defaults(func=run_sim)


def _table(summaries: list[dict]) -> str:
    head = f"{'policy':<12} {'max_sd':>8} {'mean_sd':>8} {'p95_sd':>8} {'jain':>6} " \
           f"{'gpu_util':>8} {'makespan_s':>11}"
    rows = [f"{s['policy']:<12} {s['max_sd']:>8.2f} {s['mean_sd']:>8.2f} {s['p95_sd']:>8.2f} "
            f"{s['jain']:>6.3f} {s['gpu_util']:>8.1%} {s['makespan_s']:>11.0f}" for s in summaries]
    return "\n".join([head, *rows])


def run_sim(args: argparse.Namespace) -> int:
    """Entry point: 0 ok, 2 bad input."""
    from gpufair.scheduler.sim import SimConfig, load_colocation, load_workload, simulate
    from gpufair.scheduler.sim.plots import plot_runs

    try:
        colo = load_colocation(args.colocation, args.gpu_type)
        trace = load_workload(args.workload)
        policies = [args.policy] + [p.strip() for p in (args.compare or "").split(",")
                                    if p.strip() and p.strip() != args.policy]
        results = [simulate(colo, trace, SimConfig(args.gpus, p, period_s=args.period,
                                                   max_per_gpu=args.max_per_gpu, seed=args.seed,
                                                   placement=args.placement))
                   for p in policies]
    except GpufairError as e:
        print(f"gpufair sim: {e}", file=sys.stderr)
        return 2
    summaries = [r.summary() for r in results]
    if args.json:
        out = summaries[0] if len(summaries) == 1 else {**summaries[0], "compare": summaries[1:]}
        print(json.dumps(out, indent=2))
    else:
        print(f"{args.gpu_type} x{args.gpus}, {len(trace)} jobs from {args.workload}, "
              f"placement {args.placement}")
        print(_table(summaries))
    if args.plot:
        try:
            print(f"plot: {plot_runs(results, args.plot)}", file=sys.stderr)
        except OSError as e:
            print(f"gpufair sim: cannot write plot {args.plot}: {e.strerror}", file=sys.stderr)
            return 1
    return 0
