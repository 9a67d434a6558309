"""Side-by-side PNG plots of several runs: slow-down per job and GPU
utilisation over time (matplotlib, Agg backend, imported only when asked)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from gpufair.scheduler.sim.result import SimResult


def plot_runs(results: Sequence[SimResult], out: str | Path,
              labels: Sequence[str] | None = None) -> Path:
    """Write one PNG comparing the runs (named by `labels`, default their
    split policies); returns its path."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_sd, ax_util) = plt.subplots(1, 2, figsize=(13, 4.5))
    order = [j.job for j in sorted(results[0].jobs, key=lambda j: j.arrival_s)]
    for res, name in zip(results, labels or [r.policy for r in results]):
        sd = {j.job: j.sd for j in res.jobs}
        ax_sd.plot(range(len(order)), [sd[n] for n in order], marker=".", linewidth=0.8,
                   label=f"{name} (max {max(sd.values()):.2f})")
        ts = [t - res.util_trace[0][0] for t, _ in res.util_trace]
        ax_util.step(ts, [u for _, u in res.util_trace], where="post", linewidth=0.8,
                     label=f"{name} ({res.gpu_util:.0%})")
    ax_sd.set(xlabel="job (by arrival)", ylabel="slow-down", yscale="log",
              title=f"slow-down per job, {results[0].gpu_type} x{results[0].num_gpus}")
    ax_util.set(xlabel="time (s)", ylabel="GPU busy fraction", ylim=(0, 1.05),
                title="cluster GPU utilisation")
    ax_sd.legend(fontsize=8)
    ax_util.legend(fontsize=8)
    fig.tight_layout()
    path = Path(out)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
