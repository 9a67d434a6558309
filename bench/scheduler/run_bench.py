"""Benchmark the scheduler's levers: the shared job mixes under five
configurations, Gavel-style generated traces, decision time and simulator
time, every comparison in the same run.

    .venv/bin/python bench/scheduler/run_bench.py [--data ../shared/data]
        [--colocation FILE] [--gpu-types k80,p100] [--workloads 1,2,my.csv]
        [--speedup 8] [--mix-seeds 0] [--sim-seeds 0] [--gavel-seeds 12]
        [--skip-mixes] [--skip-gavel] [--skip-timing]

Configurations (`gpufair sim` flags), all on the same trace, seed and file:
  k8s        --preset k8s: FIFO, least-loaded, time-slicing, even (plain DDP)
  packed     FIFO, packed (first fit), time-slicing, even
  sd-maxmin  FIFO, least-loaded, time-slicing, the sd-maxmin split alone
  las        Tiresias' least-attained-service queue, even splits, on gpufair's
             placement and paced shares (with least-loaded placement it
             starves wide jobs outright, so that is no fair baseline)
  gpufair    --preset gpufair: every lever on
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from gpufair.common.errors import GpufairError
from gpufair.scheduler.policy.admission import plan_round
from gpufair.scheduler.policy.arrival import place_arrival
from gpufair.scheduler.policy.fleet import PRESETS, FleetJob, NoInterference
from gpufair.scheduler.policy.tail import MAX_JOBS, plan_tail
from gpufair.scheduler.sim import SimConfig, simulate
from gpufair.scheduler.sim.bound import trace_bounds
from gpufair.scheduler.sim.generate import SCALES, gavel_trace
from gpufair.scheduler.sim.result import IDLE_KINDS
from gpufair.scheduler.sim.synthetic import synthetic_fleet

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workloads import colocations, mixes, traces  # noqa: E402  (the benchmark's inputs)

CONFIGS = {
    "k8s": dict(queue="fifo", placement="least-loaded", shares="time-slicing", policy="even"),
    "packed": dict(queue="fifo", placement="packed", shares="time-slicing", policy="even"),
    "sd-maxmin": dict(queue="fifo", placement="least-loaded", shares="time-slicing",
                      policy="sd-maxmin"),
    "las": dict(queue="las", placement="sd", shares="paced", policy="even"),
    "gpufair": dict(queue="sd", placement="sd", shares="paced", policy="sd-maxmin"),
}
#: FIFO without sharing, as Gavel's FIFO policy (no job passes an earlier one
#: that waits) and as Kubernetes would run it (later jobs pass).
STRICT_FIFO = dict(queue="fifo-strict", placement="least-loaded", shares="time-slicing",
                   policy="even", max_per_gpu=1)
NO_SHARING = dict(STRICT_FIFO, queue="fifo")
#: What the Gavel-style traces run under: FIFO without sharing and the five
#: configurations (`sd-maxmin` left out by default: ~28 s a trace).
GAVEL_RUNS = {"FIFO strict": STRICT_FIFO, "FIFO backfill": NO_SHARING, **CONFIGS}
GAVEL_DEFAULT = ("FIFO strict", "FIFO backfill", "k8s", "packed", "las", "gpufair")
#: Gavel's own simulator on its 120-job trace, 32 GPUs (the issue's figures).
GAVEL = {"FIFO": (138.6, None, 43.4, 187.6), "LAS": (23.9, None, 26.5, 199.6),
         "FTF": (15.1, 8.6, 27.0, 194.5)}
COLS = (f"{'max_sd':>7} {'p95_sd':>7} {'mean_sd':>7} {'jct_h':>7} {'p99wait_h':>9} "
        f"{'util':>6} {'goodput':>7} {'mkspan_h':>8} {'rho_max':>7} {'rho_med':>7}")


def figures(s: dict) -> str:
    """One table row's numbers from a `SimResult.summary()`."""
    return (f"{s['max_sd']:>7.2f} {s['p95_sd']:>7.2f} {s['mean_sd']:>7.2f} "
            f"{s['mean_jct_s'] / 3600:>7.2f} {s['p99_wait_s'] / 3600:>9.2f} "
            f"{s['gpu_util']:>6.1%} {s['goodput']:>7.1%} {s['makespan_s'] / 3600:>8.1f} "
            f"{s['rho_max']:>7.2f} {s['rho_median']:>7.2f}")


def run_mixes(args) -> None:
    """Every GPU type x workload x mix under every configuration (and, for a
    grid, every speed-up, mix seed and tie-break seed); targets vs k8s."""
    grid = len(args.speedups) > 1 or args.mix_seeds != [0]
    ties = args.sim_seeds != [0]

    def name(label: str, speedup: float, offset: int, tie: int) -> str:
        return (f"{label}/{speedup:g}+{offset}" if grid else label) + (f"@{tie}" if ties else "")

    runs = [(label, seed, trace, speedup, offset)
            for label, seed, trace in args.traces for speedup in args.speedups
            for offset in args.mix_seeds]
    width = max([4, *(len(name(label, speedup, offset, tie)) for label, _, _, speedup, offset in runs
                      for tie in args.sim_seeds)])
    gw = gpu_width(args.colocations)
    seeds = f", mix seeds +{', +'.join(map(str, args.mix_seeds))}" if grid else ""
    if ties:
        seeds += f", tie-break seeds +{', +'.join(map(str, args.sim_seeds))} (@)"
    print(f"\nshared mixes: {args.gpus} GPUs, arrivals / {', '.join(f'{s:g}' for s in args.speedups)}"
          f"{seeds}, replicas <= {args.max_replicas}\n"
          f"{'gpu':<{gw}} {'wl':<{width}} {'mix':<9} {'config':<10} {COLS} {'sim_s':>6}")
    cells = []
    draws: dict[tuple, list[dict]] = {}  # a cell's runs under each tie-break seed
    for gpu_type, colo in args.colocations:
        for trace_label, seed, trace, speedup, offset in runs:
            for mix, jobs in mixes(trace, args.max_replicas, speedup, seed + offset).items():
                bound = trace_bounds(colo, jobs, args.gpus)  # the trace's, whatever the tie-breaks
                for tie in args.sim_seeds:
                    label = name(trace_label, speedup, offset, tie)
                    cell = {}
                    for config, kw in CONFIGS.items():
                        t0 = time.perf_counter()
                        cell[config] = simulate(colo, jobs, SimConfig(args.gpus, seed=seed + tie,
                                                                      **kw)).summary()
                        cell[config]["sim_s"] = time.perf_counter() - t0
                        print(f"{gpu_type:<{gw}} {label:<{width}} {mix:<9} {config:<10} "
                              f"{figures(cell[config])} {cell[config]['sim_s']:>6.1f}", flush=True)
                    cell["bound"] = bound
                    cells.append(((gpu_type, label, mix), cell))
                    draws.setdefault((gpu_type, trace_label, speedup, offset, mix), []).append(cell)
    verdict(cells, width, gw)
    if ties:
        mean_verdict(list(draws.values()))


def gpu_width(colocations) -> int:
    """The tables' GPU-type column: wide enough for every type's name."""
    return max([5, *(len(gpu_type) for gpu_type, _ in colocations)])


class Row(NamedTuple):
    """One contended cell against `k8s` (cuts and ratios; points for utilisation)."""

    cut: float  # 1 - max SD / k8s's
    vs_las: float  # 1 - max SD / las's
    jct: float  # mean JCT / k8s's
    util: float  # points
    goodput: float  # points
    span: float  # makespan / k8s's
    bound_cut: float  # the largest cut any schedule could reach (sim/bound.py)
    gap: float  # max SD / the bound's
    cap: float  # points over k8s: the most utilisation a schedule busy only with useful work reaches
    interference: float  # points of k8s's busy time lost to interference (utilisation - goodput)
    idle: tuple[float, ...]  # points of gpufair's GPU time idle, by `IDLE_KINDS`


def verdict(cells, width: int = 4, gw: int = 5) -> None:
    """The targets over contended cells (k8s utilisation >= 50 %)."""
    rows = []
    print(f"\ngpufair vs k8s on contended cells (k8s util >= 50 %)\n{'gpu':<{gw}} {'wl':<{width}} "
          f"{'mix':<9} {'maxSD cut':>9} {'bound':>6} {'vs las':>7} {'jct x':>6} {'util pt':>7} "
          f"{'goodput pt':>10} {'cap pt':>6} {'mkspan x':>8} {'sim_s':>6} {'k8s sim_s':>9}")
    for (gpu_type, label, mix), c in cells:
        k8s, fair = c["k8s"], c["gpufair"]
        if k8s["gpu_util"] < 0.5:
            continue
        row = Row(1 - fair["max_sd"] / k8s["max_sd"], 1 - fair["max_sd"] / c["las"]["max_sd"],
                  fair["mean_jct_s"] / k8s["mean_jct_s"], 100 * (fair["gpu_util"] - k8s["gpu_util"]),
                  100 * (fair["goodput"] - k8s["goodput"]), fair["makespan_s"] / k8s["makespan_s"],
                  1 - c["bound"].max_sd / k8s["max_sd"], fair["max_sd"] / c["bound"].max_sd,
                  100 * (c["bound"].busy_cap - k8s["gpu_util"]),
                  100 * (k8s["gpu_util"] - k8s["goodput"]),
                  tuple(100 * fair["idle"][kind] for kind in IDLE_KINDS))
        rows.append(row)
        print(f"{gpu_type:<{gw}} {label:<{width}} {mix:<9} {row.cut:>+9.1%} {row.bound_cut:>+6.0%} "
              f"{row.vs_las:>+7.1%} {row.jct:>6.2f} {row.util:>+7.1f} {row.goodput:>+10.1f} "
              f"{row.cap:>+6.1f} {row.span:>8.3f} {fair['sim_s']:>6.1f} {k8s['sim_s']:>9.1f}")
    if not rows:
        print("(no contended cell)")
        return
    cut, vs_las, jct, util, goodput, span, bound_cut, gap, cap, interference, idle = (
        np.array(col) for col in zip(*rows))
    print(f"\n{len(rows)} contended cells: median max-SD cut {np.median(cut):+.1%} (target "
          f">= +60 %), smallest {cut.min():+.1%} (>= +30 %); mean JCT no worse in "
          f"{(jct <= 1).sum()}/{len(rows)}; utilisation within 2 points in "
          f"{(util >= -2).sum()}/{len(rows)} (worst {util.min():+.1f}), goodput within 2 "
          f"points in {(goodput >= -2).sum()}/{len(rows)}; beats las on max SD in "
          f"{(vs_las > 0).sum()}/{len(rows)}; max SD over the fluid bound: median "
          f"{np.median(gap):.2f}x, at most {gap.max():.2f}x")
    under = util < -2
    if under.any():
        # Paced GPUs are busy only with useful work, time-sliced ones also with
        # interference: below k8s's busy time, say whether gpufair took longer.
        n = int(under.sum())
        print(f"{n} cell{'s' * (n > 1)} more than 2 points under k8s's utilisation: makespan "
              f"{_span(span[under], '{:.3f}')}x k8s's, goodput "
              f"{_span(goodput[under], '{:+.1f}', ' to ')} points; out of reach without "
              f"waste (cap pt < -2) in {int((cap[under] < -2).sum())} of them")
        why = dict(zip(IDLE_KINDS, idle[under].mean(axis=0)))
        print(f"  there, on average: k8s's busy time counts {interference[under].mean():.1f} points of "
              f"interference; gpufair's GPUs idle {why['no_work']:.1f} points with no job "
              f"waiting, {why['waiting']:.1f} empty while jobs wait, {why['held']:.1f} with "
              f"their jobs held back, {why['partial']:.1f} partly used")
    short = cut < 0.3
    if short.any():
        n = int(short.sum())
        print(f"{n} cell{'s' * (n > 1)} under a 30 % cut; the fluid bound allows 30 % in "
              f"{int((bound_cut[short] >= 0.3).sum())} of them")


def mean_verdict(draws: list[list[dict]]) -> None:
    """Under several tie-break seeds: which configurations' figures the seed
    moves, and the targets against `k8s`'s mean over the draws (its
    least-loaded placement draws between equally loaded GPUs, so one draw of
    a cell's busy time can lie points from another)."""
    moved = ", ".join(f"{config} {sum(len({figures(c[config]) for c in runs}) > 1 for runs in draws)}"
                      for config in CONFIGS)
    print(f"cells whose figures differ between tie-break seeds, of {len(draws)}: {moved}")
    rows = []
    for runs in draws:
        k8s, fair = ({key: np.mean([c[config][key] for c in runs]) for key in
                      ("max_sd", "mean_jct_s", "gpu_util", "goodput")} for config in ("k8s", "gpufair"))
        if k8s["gpu_util"] >= 0.5:
            rows.append((1 - fair["max_sd"] / k8s["max_sd"], fair["mean_jct_s"] / k8s["mean_jct_s"],
                         100 * (fair["gpu_util"] - k8s["gpu_util"]),
                         100 * (fair["goodput"] - k8s["goodput"])))
    if not rows:
        return
    cut, jct, util, goodput = (np.array(col) for col in zip(*rows))
    print(f"against k8s's mean over the {len(draws[0])} draws, {len(rows)} contended cells: median "
          f"max-SD cut {np.median(cut):+.1%}, smallest {cut.min():+.1%}; mean JCT no worse in "
          f"{(jct <= 1).sum()}/{len(rows)}; utilisation within 2 points in "
          f"{(util >= -2).sum()}/{len(rows)} (worst {util.min():+.1f}), goodput within 2 points in "
          f"{(goodput >= -2).sum()}/{len(rows)}")


def _span(values: np.ndarray, fmt: str, sep: str = "-") -> str:
    """`lo-hi` (one value if they agree) in `fmt`."""
    lo, hi = fmt.format(values.min()), fmt.format(values.max())
    return lo if lo == hi else f"{lo}{sep}{hi}"


def run_gavel(args) -> None:
    """Gavel-style traces (`gpufair sim --generate gavel`), per GPU type and seed."""
    runs = {name: GAVEL_RUNS[name] for name in args.gavel_configs}
    gw = gpu_width(args.colocations)
    print(f"\nGavel-style traces: {args.gavel_jobs} jobs, one every {args.gavel_interarrival:g} s "
          f"on average, {args.gpus} GPUs, period {args.gavel_period:g} s\n"
          f"{'gpu':<{gw}} {'seed':>4} {'config':<16} {COLS}")
    table: dict[str, list[dict]] = {name: [] for name in runs}
    for gpu_type, colo in args.colocations:
        for seed in range(args.gavel_seeds):
            trace = gavel_trace(colo, args.gavel_jobs, args.gavel_interarrival, seed)
            for name, kw in runs.items():
                s = simulate(colo, trace, SimConfig(args.gpus, seed=seed,
                                                    period_s=args.gavel_period, **kw)).summary()
                table[name].append(s)
                print(f"{gpu_type:<{gw}} {seed:>4} {name:<16} {figures(s)}", flush=True)
    print(f"\nmeans over {len(table['gpufair'])} traces, against Gavel's simulator on its own "
          f"trace\n{'':<22} {'max_sd':>7} {'p95_sd':>7} {'mean_sd':>7} {'jct_h':>7} "
          f"{'mkspan_h':>8}")
    for name, rows in table.items():
        print(f"{name:<22} " + " ".join(f"{np.mean([r[k] for r in rows]) / d:>{w}.{p}f}" for k, d, w, p in (
            ("max_sd", 1, 7, 2), ("p95_sd", 1, 7, 2), ("mean_sd", 1, 7, 2),
            ("mean_jct_s", 3600, 7, 1), ("makespan_s", 3600, 8, 1))))
    for name, (max_sd, p95, jct, mk) in GAVEL.items():
        p95_text = f"{p95:>7.1f}" if p95 is not None else f"{'':>7}"
        print(f"{'Gavel ' + name:<22} {max_sd:>7.1f} {p95_text} {'':>7} {jct:>7.1f} {mk:>8.1f}")
    gavel_verdict(table["gpufair"], table["FIFO strict"])


def gavel_verdict(fair: list[dict], fifo: list[dict]) -> None:
    """Gavel FTF's figures per trace, all traces and those no heavier than
    Gavel's: its FIFO rule (`FIFO strict`) has mean JCT and makespan at most
    the figures it has on Gavel's trace."""
    _, _, fifo_jct, fifo_mk = GAVEL["FIFO"]
    max_sd, _, jct, mk = GAVEL["FTF"]
    met = np.array([r["max_sd"] <= max_sd and r["mean_jct_s"] / 3600 <= jct
                    and r["makespan_s"] / 3600 <= mk for r in fair])
    light = np.array([f["mean_jct_s"] / 3600 <= fifo_jct and f["makespan_s"] / 3600 <= fifo_mk
                      for f in fifo])
    ratio = {k: np.mean([a[k] / b[k] for a, b in zip(fair, fifo)])
             for k in ("mean_jct_s", "makespan_s")}
    print(f"gpufair at least Gavel FTF's figures on every count in {met.sum()}/{len(met)} traces, "
          f"in {met[light].sum()}/{light.sum()} no heavier than Gavel's (FIFO strict at most "
          f"{fifo_jct} h mean JCT and {fifo_mk} h makespan); against FIFO strict in the same run: "
          f"mean JCT x{ratio['mean_jct_s']:.2f} (Gavel FTF/FIFO x{jct / fifo_jct:.2f}), "
          f"makespan x{ratio['makespan_s']:.2f} (x{mk / fifo_mk:.2f})")


def run_timing(args) -> None:
    """A whole paced round, one arrival placed between rounds, and the tail
    plan at its largest (`tail.MAX_JOBS` waiting jobs, every order allowed),
    vs cluster size."""
    print(f"\ndecision time (ms, best / median of {args.repeat}; one core)\n{'jobs':>5} "
          f"{'gpus':>5} {'round':>15} {'arrival':>15} {'tail plan':>15}")
    newcomer = FleetJob("arriving", 4, 128, 3600.0, 1e6, 500.0, 0.0018, 0.02, model="m")
    for n_jobs, n_gpus in ((250, 1024), (1000, 4096), (1000, 2048), (4000, 16384)):
        jobs, gpus = synthetic_fleet(n_jobs, n_gpus, seed=n_jobs, waiting=5)
        last, _ = synthetic_fleet(0, n_gpus, seed=n_jobs, waiting=MAX_JOBS)
        empty_at = np.random.default_rng(n_jobs).uniform(0.0, 3600.0, n_gpus)
        rounds, arrivals, tails = [], [], []
        plan = None
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            plan = plan_round(jobs, gpus, 3700.0, PRESETS["gpufair"])
            rounds.append(1000 * (time.perf_counter() - t0))
            t0 = time.perf_counter()
            place_arrival(plan.outlook, newcomer, NoInterference())
            arrivals.append(1000 * (time.perf_counter() - t0))
            t0 = time.perf_counter()
            plan_tail(last, empty_at, 3700.0, bound=float("inf"))
            tails.append(1000 * (time.perf_counter() - t0))
        print(f"{n_jobs:>5} {n_gpus:>5} {min(rounds):>7.1f} / {statistics.median(rounds):<5.1f} "
              f"{min(arrivals):>7.2f} / {statistics.median(arrivals):<5.2f} "
              f"{min(tails):>7.1f} / {statistics.median(tails):<5.1f}", flush=True)


def _numbers(ap: argparse.ArgumentParser, flag: str, text: str, kind: type) -> list:
    """A comma-separated list of numbers, or a usage error naming `flag`."""
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        ap.error(f"{flag}: want comma-separated {kind.__name__}s, not {text!r}")
    if not values:
        ap.error(f"{flag}: give at least one value")
    return values


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[3] / "shared" / "data"))
    ap.add_argument("--colocation", help="Gavel-format co-location JSON (default: the shared one)")
    ap.add_argument("--gpu-types", help="GPU types, comma-separated (default: all in the file)")
    ap.add_argument("--workloads", default="1,2,3,4",
                    help="AdaptDL mix numbers and/or trace files, comma-separated")
    ap.add_argument("--gpus", type=int, default=32)
    ap.add_argument("--speedup", default="8", help="divide mix arrivals by this; several, "
                    "comma-separated, run every mix at each (a grid: 6,8,10)")
    ap.add_argument("--mix-seeds", default="0", help="offsets added to each trace's seed when "
                    "drawing its mixes, comma-separated (a grid: 0,10)")
    ap.add_argument("--sim-seeds", default="0", help="offsets added to the simulator's seed "
                    "(the least-loaded placement's draws between equally loaded GPUs; gpufair's "
                    "never draws), comma-separated: the same cells again under other draws "
                    "(a grid: 0,100,200)")
    ap.add_argument("--max-replicas", type=int,
                    help="cap each mix job's GPUs (default: 16, or --gpus if fewer)")
    ap.add_argument("--gavel-seeds", type=int, default=12, help="generated traces per GPU type")
    ap.add_argument("--gavel-jobs", type=int, default=120)
    ap.add_argument("--gavel-interarrival", type=float, default=120.0)
    ap.add_argument("--gavel-period", type=float, default=360.0,
                    help="round period on those traces (Gavel's rounds are 6 minutes)")
    ap.add_argument("--gavel-configs", default=",".join(GAVEL_DEFAULT),
                    help=f"comma-separated, of: {', '.join(GAVEL_RUNS)} (gpufair and FIFO "
                         f"strict always run)")
    ap.add_argument("--repeat", type=int, default=5, help="timing: decisions per size")
    ap.add_argument("--skip-mixes", action="store_true")
    ap.add_argument("--skip-gavel", action="store_true")
    ap.add_argument("--skip-timing", action="store_true")
    args = ap.parse_args()
    names = [n.strip() for n in args.gavel_configs.split(",") if n.strip()]
    unknown = sorted(set(names) - set(GAVEL_RUNS))
    if unknown:
        ap.error(f"--gavel-configs: unknown {', '.join(unknown)}; choose from {', '.join(GAVEL_RUNS)}")
    args.gavel_configs = [n for n in GAVEL_RUNS if n in {*names, "FIFO strict", "gpufair"}]
    args.speedups = _numbers(ap, "--speedup", args.speedup, float)
    args.mix_seeds = _numbers(ap, "--mix-seeds", args.mix_seeds, int)
    args.sim_seeds = _numbers(ap, "--sim-seeds", args.sim_seeds, int)
    if not all(0 < s < float("inf") for s in args.speedups):
        ap.error("--speedup: every speed-up must be a positive number")
    least = 1 if args.skip_gavel else max(SCALES)
    if args.gpus < least:
        why = "" if args.skip_gavel else f" (the Gavel-style traces hold {least}-GPU jobs; or --skip-gavel)"
        ap.error(f"--gpus: want at least {least}{why}")
    if args.max_replicas is None:
        args.max_replicas = min(16, args.gpus)
    elif not 1 <= args.max_replicas <= args.gpus:
        ap.error(f"--max-replicas: want 1 to --gpus ({args.gpus})")
    args.colocations = colocations(args.data, args.colocation, args.gpu_types)
    if not args.skip_mixes:
        args.traces = traces(args.data, args.workloads)
    if not args.skip_timing:
        run_timing(args)
    if not args.skip_mixes:
        run_mixes(args)
    if not args.skip_gavel:
        run_gavel(args)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except GpufairError as exc:  # bad input files: one line, not a traceback
        print(f"run_bench: {exc}", file=sys.stderr)
        sys.exit(2)
