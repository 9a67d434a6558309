"""What a simulation run produces, and the summary scripts depend on."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class JobResult:
    """One finished job: slow-down (end to end), completion time (from
    arrival), when, and the slow-down of its running time alone (from
    placement, i.e. without the queue wait re-splitting cannot shorten)."""

    job: str
    sd: float
    jct_s: float
    arrival_s: float
    finish_s: float
    num_gpus: int
    start_s: float = 0.0
    run_sd: float = 1.0


@dataclass(frozen=True)
class SimResult:
    """A whole run: per-job results, utilisation over time and totals."""

    policy: str
    gpu_type: str
    num_gpus: int
    jobs: tuple[JobResult, ...]
    util_trace: tuple[tuple[float, float], ...]
    makespan_s: float
    gpu_util: float
    decisions: int
    decision_s: float
    placement: str = "least-loaded"
    uneven_share: float = 0.0  # of multi-GPU job time, GPUs holding unequal job counts

    def summary(self) -> dict:
        """The JSON summary (keys are a contract with scripts)."""
        sds = np.array([j.sd for j in self.jobs])
        run = np.array([j.run_sd for j in self.jobs])
        wait = np.array([j.start_s - j.arrival_s for j in self.jobs])
        jain = float(sds.sum() ** 2 / (len(sds) * np.sum(sds ** 2))) if len(sds) else 1.0
        return {
            "policy": self.policy, "placement": self.placement, "gpu_type": self.gpu_type,
            "num_gpus": self.num_gpus,
            "max_sd": float(sds.max()), "mean_sd": float(sds.mean()),
            "p95_sd": float(np.percentile(sds, 95)), "jain": jain,
            "max_run_sd": float(run.max()), "mean_run_sd": float(run.mean()),
            "mean_wait_s": float(wait.mean()), "uneven_share": self.uneven_share,
            "gpu_util": float(self.gpu_util), "makespan_s": float(self.makespan_s),
            "decisions": self.decisions,
            "mean_decision_ms": 1000 * self.decision_s / self.decisions if self.decisions else 0.0,
            "jobs": [{"job": j.job, "sd": j.sd, "jct_s": j.jct_s, "num_gpus": j.num_gpus,
                      "run_sd": j.run_sd, "wait_s": j.start_s - j.arrival_s}
                     for j in self.jobs],
        }
