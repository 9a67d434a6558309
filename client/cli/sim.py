"""`gpufair sim`: run the scheduler's levers over a job trace on a simulated
cluster, or generate a Gavel-style trace (`--generate gavel`)."""

from __future__ import annotations

import argparse
import json
import sys

from gpufair.client.cli.common import EXIT_FAIL, EXIT_OK, EXIT_USAGE
from gpufair.common.errors import GpufairError, InvalidArgument
from gpufair.common.files import write_whole

_LEVERS = ("queue", "placement", "shares", "policy")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `sim` subcommand."""
    p = subparsers.add_parser(
        "sim", help="simulate the scheduler over a job trace, or generate a trace",
        description="Trace-driven simulation of a shared GPU cluster: queue order, placement, "
                    "GPU shares and minibatch splits. With --generate, write a trace instead.")
    p.add_argument("--colocation", required=True, help="Gavel-format co-location JSON")
    p.add_argument("--gpu-type", required=True, help="GPU type in that file, e.g. k80")
    p.add_argument("--gpus", type=int, help="number of GPUs in the cluster")
    p.add_argument("--workload", help="trace file: gpufair or AdaptDL CSV, or a Gavel trace")
    p.add_argument("--preset", metavar="NAME",
                   help="k8s (FIFO, least-loaded, time-slicing, even splits: the Kubernetes "
                        "default with plain DDP) or gpufair (every lever on); the flags below "
                        "override its parts")
    p.add_argument("--policy", help="split policy: even, balance, sd-feedback or sd-maxmin")
    p.add_argument("--queue", help="queue order: fifo (default), fifo-strict (no job passes an "
                                    "earlier one, as Gavel's FIFO), las or sd")
    p.add_argument("--placement", metavar="NAME",
                   help="where admitted jobs go: least-loaded (default; fewest jobs first, "
                        "seeded ties), packed (first fit on the lowest-numbered GPUs with room), "
                        "random (seeded) or sd (least predicted slow-down)")
    p.add_argument("--shares", help="how a shared GPU's time is divided: time-slicing "
                                    "(default) or paced (the scheduler gives each rank a share)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the random draws of placement and of --generate (default 0)")
    p.add_argument("--json", action="store_true", help="print the JSON summary")
    p.add_argument("--plot", metavar="OUT.png", help="write SD and utilisation plots")
    p.add_argument("--compare", metavar="A,B,...",
                   help="also run these split policies (other levers unchanged) or presets")
    p.add_argument("--period", type=float, default=60.0, help="policy period, s (default 60)")
    p.add_argument("--max-per-gpu", type=int, default=4,
                   help="jobs resident on one GPU at most (memory bound; default 4)")
    gen = p.add_argument_group("trace generation")
    gen.add_argument("--generate", metavar="KIND", help="write a synthetic trace: gavel")
    gen.add_argument("--jobs", type=int, help="jobs to generate")
    gen.add_argument("--interarrival", type=float, help="mean seconds between arrivals")
    gen.add_argument("--out", metavar="TRACE.csv", help="where to write the trace")
    p.set_defaults(func=run_sim)


def _configs(args: argparse.Namespace) -> list[tuple[str, dict]]:
    """(label, SimConfig keywords) of the main run and every --compare entry."""
    from gpufair.scheduler.policy import policy_names
    from gpufair.scheduler.policy.fleet import PRESETS

    def levers(preset: str | None) -> dict:
        if preset is not None and preset not in PRESETS:
            raise InvalidArgument(f"unknown preset {preset!r}; choose one of "
                                  f"{', '.join(PRESETS)}")
        base = PRESETS[preset] if preset else None
        out = {"queue": "fifo", "placement": "least-loaded", "shares": "time-slicing",
               "policy": None}
        if base is not None:
            out = {"queue": base.queue, "placement": base.placement, "shares": base.shares,
                   "policy": base.split}
        return out

    main = levers(args.preset)
    for name in _LEVERS:
        if getattr(args, name) is not None:
            main[name] = getattr(args, name)
    if main["policy"] is None:
        raise InvalidArgument("give --policy or --preset (--queue, --placement and --shares "
                              "change a preset's parts)")
    runs = [(args.preset or main["policy"], main)]
    for item in (c.strip() for c in (args.compare or "").split(",")):
        if not item or item in {label for label, _ in runs}:
            continue
        if item not in PRESETS and item not in policy_names():
            raise InvalidArgument(f"--compare {item!r}: not a split policy "
                                  f"({', '.join(policy_names())}) or a preset "
                                  f"({', '.join(PRESETS)})")
        runs.append((item, levers(item) if item in PRESETS else {**main, "policy": item}))
    return runs


def _table(summaries: list[tuple[str, dict]]) -> str:
    head = (f"{'run':<12} {'queue/placement/shares':<32} {'max_sd':>7} {'mean_sd':>7} "
            f"{'p95_sd':>7} {'mean_jct_s':>10} {'gpu_util':>8} {'goodput':>7} {'makespan_s':>10}")
    rows = [f"{label:<12} {s['queue'] + '/' + s['placement'] + '/' + s['shares']:<32} "
            f"{s['max_sd']:>7.2f} {s['mean_sd']:>7.2f} {s['p95_sd']:>7.2f} "
            f"{s['mean_jct_s']:>10.0f} {s['gpu_util']:>8.1%} {s['goodput']:>7.1%} "
            f"{s['makespan_s']:>10.0f}"
            for label, s in summaries]
    return "\n".join([head, *rows])


def run_generate(args: argparse.Namespace) -> int:
    """`--generate`: 0 written, 1 cannot write, 2 bad input."""
    from gpufair.scheduler.sim import load_colocation
    from gpufair.scheduler.sim.generate import GENERATORS, gavel_trace, to_csv

    if args.generate not in GENERATORS:
        print(f"gpufair sim: unknown generator {args.generate!r}; choose one of "
              f"{', '.join(GENERATORS)}", file=sys.stderr)
        return EXIT_USAGE
    missing = [f"--{n}" for n in ("jobs", "interarrival", "out") if getattr(args, n) is None]
    if missing:
        print(f"gpufair sim: --generate needs {', '.join(missing)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        trace = gavel_trace(load_colocation(args.colocation, args.gpu_type), args.jobs,
                            args.interarrival, args.seed)
        write_whole(args.out, to_csv(trace))
    except GpufairError as e:
        print(f"gpufair sim: {e}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as e:
        print(f"gpufair sim: cannot write {args.out}: {e.strerror}", file=sys.stderr)
        return EXIT_FAIL
    gpus = sum(j.num_gpus for j in trace) / len(trace)
    print(f"{args.out}: {len(trace)} jobs on {args.gpu_type}, last arrival at "
          f"{trace[-1].arrival_s:.0f} s, {gpus:.2f} GPUs per job on average")
    return EXIT_OK


def run_sim(args: argparse.Namespace) -> int:
    """Entry point: 0 ok, 1 cannot write the plot, 2 bad input."""
    if args.generate is not None:
        return run_generate(args)
    from gpufair.scheduler.sim import SimConfig, load_colocation, load_workload, simulate
    from gpufair.scheduler.sim.plots import plot_runs

    try:
        missing = [f"--{n}" for n in ("gpus", "workload") if getattr(args, n) is None]
        if missing:
            raise InvalidArgument(f"a simulation needs {', '.join(missing)}")
        for flag, value, least in (("--gpus", args.gpus, 1), ("--max-per-gpu", args.max_per_gpu, 1)):
            if value < least:
                raise InvalidArgument(f"{flag} must be at least {least}, got {value}")
        if not args.period > 0:
            raise InvalidArgument(f"--period must be a positive number of seconds, got {args.period:g}")
        colo = load_colocation(args.colocation, args.gpu_type)
        trace = load_workload(args.workload)
        results = [(label, simulate(colo, trace, SimConfig(
            args.gpus, kw["policy"], period_s=args.period, max_per_gpu=args.max_per_gpu,
            seed=args.seed, placement=kw["placement"], queue=kw["queue"],
            shares=kw["shares"]))) for label, kw in _configs(args)]
    except GpufairError as e:
        print(f"gpufair sim: {e}", file=sys.stderr)
        return EXIT_USAGE
    summaries = [(label, r.summary()) for label, r in results]
    if args.json:
        first = summaries[0][1]
        out = first if len(summaries) == 1 else {
            **first, "compare": [{"label": label, **s} for label, s in summaries[1:]]}
        print(json.dumps(out, indent=2))
    else:
        print(f"{args.gpu_type} x{args.gpus}, {len(trace)} jobs from {args.workload}")
        print(_table(summaries))
    if args.plot:
        try:
            path = plot_runs([r for _, r in results], args.plot, [label for label, _ in results])
            print(f"plot: {path}", file=sys.stderr)
        except OSError as e:
            print(f"gpufair sim: cannot write plot {args.plot}: {e.strerror}", file=sys.stderr)
            return EXIT_FAIL
    return EXIT_OK
