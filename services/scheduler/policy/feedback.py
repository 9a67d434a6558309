"""`sd-feedback`: the reference paper's approach. Every period, from the
measured slow-downs, each multi-GPU job moves batch share away from GPUs
whose other occupants are worse off than itself (higher SD) and towards GPUs
whose occupants are better off (or that it has alone, SD 1), so that the
slow-downs of jobs sharing GPUs drift together."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from gpufair.scheduler.policy.base import finalize
from gpufair.scheduler.policy.model import slowdown
from gpufair.scheduler.policy.rounding import round_split
from gpufair.scheduler.policy.simple import current_rates
from gpufair.scheduler.policy.types import ClusterState, Decision, PolicyConfig
from gpufair.scheduler.policy.warm import WarmStart


def _neighbour_sd(cluster: ClusterState, sds: np.ndarray) -> list[list[float]]:
    """For each job and rank: mean SD of the *other* jobs on that rank's GPU
    (1.0 when the job has the GPU to itself)."""
    on_gpu: dict[str, list[int]] = defaultdict(list)
    for j, job in enumerate(cluster.jobs):
        for r in job.ranks:
            on_gpu[r.gpu].append(j)
    out = []
    for j, job in enumerate(cluster.jobs):
        row = []
        for r in job.ranks:
            others = [sds[k] for k in on_gpu[r.gpu] if k != j]
            row.append(float(np.mean(others)) if others else 1.0)
        out.append(row)
    return out


class SdFeedbackPolicy:
    """Multiplicative share updates driven by measured slow-down gaps."""

    name = "sd-feedback"

    def decide(self, cluster: ClusterState, config: PolicyConfig,
               warm: WarmStart | None = None) -> dict[str, Decision]:
        """Shift each job's batch share towards GPUs whose neighbours are better off."""
        rates = current_rates(cluster)
        sds = np.array([slowdown(job, float(r)) for job, r in zip(cluster.jobs, rates)])
        sds = np.where(np.isfinite(sds), sds, 1e6)
        neighbours = _neighbour_sd(cluster, sds)
        out = {}
        for j, job in enumerate(cluster.jobs):
            nums = {"sd_now": float(sds[j]), "rate_now": float(rates[j])}
            if not job.splittable:
                out[job.job] = finalize(job, self.name, job.split, config, "", nums)
                continue
            weights = []
            for b, nb in zip(job.split, neighbours[j]):
                gap = (sds[j] - nb) / max(sds[j], nb, 1e-9)
                weights.append(b * math.exp(config.feedback_gain * gap))
            split = round_split(weights, job.global_batch, [r.cap for r in job.ranks])
            nums.update({f"neighbour_sd[{r.gpu}]": nb for r, nb in zip(job.ranks, neighbours[j])})
            reason = (f"SD {sds[j]:.2f} vs neighbours' SD "
                      + ", ".join(f"{r.gpu}:{nb:.2f}" for r, nb in zip(job.ranks, neighbours[j])))
            out[job.job] = finalize(job, self.name, split, config, reason, nums)
        return out
