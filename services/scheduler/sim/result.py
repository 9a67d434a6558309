"""What a simulation run produces, and the summary scripts depend on."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


#: Why a GPU idles, in the order of `SimResult.idle`: no job on it and none
#: waiting; none on it while jobs wait (too few GPUs free for them, GPUs held
#: for a reservation or draining for a wide job); its jobs all held back (a
#: more urgent job runs on another of their GPUs); its jobs leave part of its
#: time unused (a step's CPU work, a paced sliver).
IDLE_KINDS = ("no_work", "waiting", "held", "partial")


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
    rho: float = 1.0  # Themis: JCT / time on a 1/N share of the cluster


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
    queue: str = "fifo"
    shares: str = "time-slicing"
    rounds: int = 0  # admission rounds (every event; paced: also every period)
    round_s: float = 0.0
    idle: tuple[float, ...] = (0.0,) * len(IDLE_KINDS)  # GPU time idle, of GPUs x makespan

    def idle_by_kind(self) -> dict[str, float]:
        """Idle GPU time (of GPUs x makespan) by why it idles (`IDLE_KINDS`)."""
        return dict(zip(IDLE_KINDS, self.idle))

    def goodput(self) -> float:
        """Useful GPU time over capacity: every job's exclusive GPU-seconds over
        GPUs x makespan. Busy time lost to interference counts in `gpu_util`,
        not here."""
        work = sum(j.jct_s / j.sd * j.num_gpus for j in self.jobs)
        return float(work / (self.num_gpus * self.makespan_s)) if self.makespan_s > 0 else 0.0

    def summary(self) -> dict:
        """The JSON summary (keys are a contract with scripts)."""
        sds = np.array([j.sd for j in self.jobs])
        run = np.array([j.run_sd for j in self.jobs])
        wait = np.array([j.start_s - j.arrival_s for j in self.jobs])
        rho = np.array([j.rho for j in self.jobs])
        jain = float(sds.sum() ** 2 / (len(sds) * np.sum(sds ** 2))) if len(sds) else 1.0
        return {
            "policy": self.policy, "placement": self.placement, "queue": self.queue,
            "shares": self.shares, "gpu_type": self.gpu_type, "num_gpus": self.num_gpus,
            "max_sd": float(sds.max()), "mean_sd": float(sds.mean()),
            "p95_sd": float(np.percentile(sds, 95)), "jain": jain,
            "max_run_sd": float(run.max()), "mean_run_sd": float(run.mean()),
            "mean_wait_s": float(wait.mean()), "p99_wait_s": float(np.percentile(wait, 99)),
            "mean_jct_s": float(np.mean([j.jct_s for j in self.jobs])),
            "rho_max": float(rho.max()), "rho_median": float(np.median(rho)),
            "uneven_share": self.uneven_share,
            "gpu_util": float(self.gpu_util), "goodput": self.goodput(),
            "idle": self.idle_by_kind(),
            "makespan_s": float(self.makespan_s),
            "decisions": self.decisions,
            "mean_decision_ms": 1000 * self.decision_s / self.decisions if self.decisions else 0.0,
            "rounds": self.rounds,
            "mean_round_ms": 1000 * self.round_s / self.rounds if self.rounds else 0.0,
            "jobs": [{"job": j.job, "sd": j.sd, "jct_s": j.jct_s, "num_gpus": j.num_gpus,
                      "run_sd": j.run_sd, "wait_s": j.start_s - j.arrival_s, "rho": j.rho}
                     for j in self.jobs],
        }
