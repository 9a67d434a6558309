"""sd-maxmin's decision time, this tree against another commit, in one run.

    .venv/bin/python bench/scheduler/same_run.py --base 2874943   # ~5 min

Absolute times on a shared VM move between sessions by more than a change's
gain, so a change is measured against its base in the same run: the base is
checked out in a temporary git worktree, and the two trees take turns
(`--rounds` times), each in a fresh process, on the decision-time bench's
clusters (`sim/synthetic.py`). Per cluster: the first decision cold (best
of 3), then `--periods` decisions one period apart, each warm from the last
(median / max), and the same clusters decided cold (median); ms.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# (jobs, GPUs, job widths, node size), as in run_bench.TIMING_SIZES.
SIZES = [(1000, 4096, (1, 8), None), (1000, 2048, (1, 8), None), (1000, 2048, (1, 8), 8),
         (1000, 4096, (8, 8), 8)]


def _use_tree(tree: Path) -> None:
    """Import gpufair from `tree` instead of the installed (editable) checkout:
    its two top-level packages are loaded by path before anything imports them."""
    for name, folder in (("gpufair", tree / "gpufair"),
                         ("gpufair.scheduler", tree / "services" / "scheduler")):
        spec = importlib.util.spec_from_file_location(
            name, folder / "__init__.py", submodule_search_locations=[str(folder)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)


def measure(tree: Path, periods: int) -> None:
    """One tree's row per cluster (run in its own process)."""
    _use_tree(tree)
    import gpufair.scheduler.policy as policy
    from gpufair.scheduler.policy import WarmStart, decide
    assert Path(policy.__file__).is_relative_to(tree), policy.__file__  # the tree asked for
    from gpufair.scheduler.sim.synthetic import next_period, synthetic_cluster

    def timed(*args) -> tuple[float, dict]:
        t0 = time.perf_counter()
        out = decide(*args)
        return 1000 * (time.perf_counter() - t0), out

    for n, g, widths, node in SIZES:
        cluster = synthetic_cluster(n, g, seed=n, widths=widths, node=node)
        first = min(timed(cluster, "sd-maxmin")[0] for _ in range(3))
        warm = WarmStart()
        decisions, later, hot, cold = decide(cluster, "sd-maxmin", None, warm), cluster, [], []
        for period in range(periods):
            later = next_period(later, decisions, g, period, widths, node=node)
            ms, decisions = timed(later, "sd-maxmin", None, warm)
            hot.append(ms)
            cold.append(timed(later, "sd-maxmin")[0])
        label = f"{n}/{g} {node or 'any'}"
        print(f"{label:<16} {first:>10.1f} {statistics.median(hot):>11.1f}"
              f" {max(hot):>8.1f} {statistics.median(cold):>11.1f}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the commit to compare against")
    ap.add_argument("--rounds", type=int, default=2, help="alternations of the two trees")
    ap.add_argument("--periods", type=int, default=10)
    ap.add_argument("--measure", help=argparse.SUPPRESS)  # internal: one tree, one process
    args = ap.parse_args()
    if args.measure:
        measure(Path(args.measure), args.periods)
        return 0
    here = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(here), "worktree", "add", "--detach", "-q", str(base),
                        args.base], check=True)
        try:
            for r in range(args.rounds):
                for label, tree in ((args.base, base), ("this tree", here)):
                    print(f"\nround {r + 1}, {label}\n{'cluster':<16} {'first cold':>10} "
                          f"{'warm median':>11} {'warm max':>8} {'cold median':>11}", flush=True)
                    subprocess.run([sys.executable, __file__, "--base", args.base, "--periods",
                                    str(args.periods), "--measure", str(tree)], check=True)
        finally:
            subprocess.run(["git", "-C", str(here), "worktree", "remove", "--force", str(base)],
                           check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
