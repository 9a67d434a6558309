"""The demo's side-by-side table, JSON and chart."""

from __future__ import annotations

import json
from pathlib import Path

from gpufair.demo.mix import RunResult


def _cell(job: dict) -> str:
    text = f"SD {job['sd']:.2f}  JCT {job['jct_s']:5.1f}s"  # fixed width: the columns stay aligned
    return f"{text:>22}"


def table(runs: list[RunResult]) -> str:
    """One phase side by side: the baseline first, gpufair last."""
    base, fair = runs[0], runs[-1]
    lines = [f"{'':14}" + "".join(f"{r.policy:>22}" for r in runs)]
    for i, job in enumerate(base.jobs):
        cells = "".join(_cell(r.jobs[i]) for r in runs)
        lines.append(f"{job['job']:14}{cells}")
    for label, attr, fmt in [("max SD", "max_sd", "{:.2f}"), ("mean SD", "mean_sd", "{:.2f}"), ("GPU util", "gpu_util", "{:.1%}"),
                             ("  + start-up", "gpu_util_with_startup", "{:.1%}"), ("data wait", "data_wait", "{:.2%}"), ("makespan", "makespan_s", "{:.1f}s")]:
        lines.append(f"{label:14}" + "".join(f"{fmt.format(getattr(r, attr)):>22}" for r in runs))
    cut = 1 - fair.max_sd / base.max_sd if base.max_sd else 0.0
    points = 100 * (fair.gpu_util - base.gpu_util)
    lines.append(f"\n{fair.policy} vs {base.policy}: max slow-down {cut:.0%} {'lower' if cut >= 0 else 'HIGHER'}, "
                 f"GPU utilisation {points:+.1f} points ({fair.gpu_util:.1%} vs {base.gpu_util:.1%})")
    return "\n".join(lines)


def write_json(runs: list[RunResult], path: Path) -> None:
    path.write_text(json.dumps({"runs": [r.to_json() for r in runs]}, indent=2))


def chart(runs: list[RunResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    phases = list(dict.fromkeys(r.phase for r in runs))
    width = max(sum(r.phase == ph for r in runs) for ph in phases)
    fig, grid = plt.subplots(len(phases), width, figsize=(6 * width, 4 * len(phases)), squeeze=False)
    for row, phase in zip(grid, phases):
        _phase_charts(row, [r for r in runs if r.phase == phase])
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _phase_charts(axes, runs: list[RunResult]) -> None:
    top = max((s["sd"] for r in runs for s in r.series), default=1.0)
    for ax, run in zip(axes, runs):
        for job in sorted({s["job"] for s in run.series}):
            pts = [(s["t"], s["sd"]) for s in run.series if s["job"] == job and s["sd"] > 0]
            if pts:
                ax.plot(*zip(*pts), label=job)
        name = run.preset if run.policy == run.preset else f"{run.preset} ({run.policy})"
        ax.set_title(f"{run.phase}, {name}: max SD {run.max_sd:.2f}, util {run.gpu_util:.0%}")
        ax.set_xlabel("time (s)")
        ax.set_ylim(0.8, max(top, 1.0) * 1.05)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("estimated slow-down")
    axes[0].legend(fontsize="small")
