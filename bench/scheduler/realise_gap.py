"""How much sd-maxmin's greedy realisation leaves on the table.

    .venv/bin/python bench/scheduler/realise_gap.py     # ~50 s

At every third sd-maxmin decision of five multi-GPU simulator cells
(least-loaded placement, the benchmark's setup), the cluster is decided
again cold with no minimum change (`min_change` 0: the 5 % hysteresis
would hide small gains), and for each component of up to 8 jobs that needs
the LP, two searches report the component's largest predicted SD
(time-slicing model) as realised / found:
- `budget`: the same decision with 25x the greedy's evaluations (same LP
  plan, same start);
- `local`: a finer neighbourhood from the realised splits, moving 1 sample,
  1/8 or 1/2 of a rank's samples to any other rank of any re-splittable
  job, keeping the first move that lowers the largest predicted SD, up to
  400 evaluations.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpufair.scheduler.policy import PolicyConfig, decide
from gpufair.scheduler.policy.components import find_components
from gpufair.scheduler.policy.realise import badness
from gpufair.scheduler.policy.types import JobState
from gpufair.scheduler.sim import SimConfig, Simulator, load_colocation, load_workload

sys.path.insert(0, str(Path(__file__).parent))
from workloads import mixes  # noqa: E402  (the benchmark's own job mixes)

CELLS = [("k80", "1"), ("k80", "3"), ("p100", "2"), ("p100", "3"), ("p100", "4")]
_CHOSEN = PolicyConfig(min_change=0.0)
_DEEP = PolicyConfig(min_change=0.0, realise_evals=1000, realise_work=10**9)
_LOCAL_EVALS = 400


def worst(jobs: list[JobState], splits: list[tuple[int, ...]]) -> float:
    """The largest predicted SD under time-slicing."""
    return float(badness(jobs, splits, "sd")[0].max())


def _moves(jobs: list[JobState], cur: list[tuple[int, ...]]):
    """Every single-job move of the finer neighbourhood."""
    for f, job in enumerate(jobs):
        if not job.splittable:
            continue
        for a, b_a in enumerate(cur[f]):
            for b, rank in enumerate(job.ranks):
                room = (rank.cap or job.global_batch) - cur[f][b]
                for d in dict.fromkeys((b_a // 2, b_a // 8, 1)):  # distinct, in order
                    if a == b or d < 1 or b_a - d < 1 or d > room:
                        continue
                    split = list(cur[f])
                    split[a] -= d
                    split[b] += d
                    yield cur[:f] + [tuple(split)] + cur[f + 1:]


def local_search(jobs: list[JobState], cur: list[tuple[int, ...]]) -> float:
    best, used = worst(jobs, cur), 1
    while used < _LOCAL_EVALS:
        for trial in _moves(jobs, cur):
            value, used = worst(jobs, trial), used + 1
            if value < best * (1 - 1e-9):
                best, cur = value, trial
                break
            if used >= _LOCAL_EVALS:
                return best
        else:
            return best  # no move helps
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data",
                    default=str(Path(__file__).resolve().parents[3] / "shared" / "data"))
    args = ap.parse_args()
    colo_path = Path(args.data) / "colocation" / "gavel-physical-k80-p100.json"
    print(f"{'cell':<18} {'comps':>5} {'budget':>7} {'bdg max':>7} {'local':>7} "
          f"{'local max':>9} {'none better':>11}")
    everything: list[float] = []
    for gpu_type, w in CELLS:
        colo = load_colocation(colo_path, gpu_type)
        trace = load_workload(Path(args.data) / "workloads" / f"adaptdl-workload-{w}.csv")
        rows: list[tuple[float, float]] = []
        seen = [0]

        def score(cluster, decisions, rows=rows, seen=seen):
            seen[0] += 1
            if seen[0] % 3:
                return
            chosen = decide(cluster, "sd-maxmin", _CHOSEN)
            deep = decide(cluster, "sd-maxmin", _DEEP)
            for comp in find_components(cluster).general:
                jobs = [cluster.jobs[j] for j in comp]
                if len(jobs) > 8:
                    continue
                cur = [chosen[j.job].split for j in jobs]
                real = worst(jobs, cur)
                rows.append((real / worst(jobs, [deep[j.job].split for j in jobs]),
                             real / local_search(jobs, cur)))

        Simulator(colo, mixes(trace, 16, 8.0, int(w))["multi-GPU"],
                  SimConfig(32, "sd-maxmin", seed=int(w), placement="least-loaded"),
                  on_decision=score).run()
        everything += [r[1] for r in rows]
        if rows:
            print(f"{gpu_type + ' w' + w + ' multi-GPU':<18} {len(rows):>5} "
                  f"{sum(r[0] for r in rows) / len(rows):>7.4f} {max(r[0] for r in rows):>7.3f} "
                  f"{sum(r[1] for r in rows) / len(rows):>7.4f} {max(r[1] for r in rows):>9.3f} "
                  f"{sum(r[1] < 1 + 1e-9 for r in rows) / len(rows):>11.0%}")
    if everything:
        n = len(everything)
        print(f"{'all':<18} {n:>5} {'':>7} {'':>7} {sum(everything) / n:>7.4f} "
              f"{max(everything):>9.3f} "
              f"{sum(r < 1 + 1e-9 for r in everything) / n:>11.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
