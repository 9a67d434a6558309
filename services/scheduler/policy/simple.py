"""The two per-job baselines: `even` (the DDP default) and `balance`
(LB-BSP-style straggler balancing, fast for each job, blind to fairness)."""

from __future__ import annotations

import numpy as np

from gpufair.scheduler.policy.base import finalize
from gpufair.scheduler.policy.model import even_split, shared_rates, slowdown
from gpufair.scheduler.policy.rounding import round_split
from gpufair.scheduler.policy.types import ClusterState, Decision, JobState, PolicyConfig
from gpufair.scheduler.policy.warm import WarmStart


def current_rates(cluster: ClusterState) -> np.ndarray:
    """Measured speeds where the snapshot has them, model predictions elsewhere."""
    measured = [j.rate for j in cluster.jobs]
    if all(r is not None and r > 0 for r in measured):
        return np.array(measured, dtype=float)
    predicted = shared_rates(cluster.jobs).rates
    return np.array([m if m is not None and m > 0 else p
                     for m, p in zip(measured, predicted)], dtype=float)


class EvenPolicy:
    """Every rank gets B/n; the remainder goes one each to the first ranks."""

    name = "even"

    def decide(self, cluster: ClusterState, config: PolicyConfig,
               warm: WarmStart | None = None) -> dict[str, Decision]:
        """Propose the even split for every job."""
        out = {}
        for job in cluster.jobs:
            caps = [r.cap for r in job.ranks]
            proposal = round_split([1.0] * len(job.ranks), job.global_batch, caps)
            if proposal != even_split(job.global_batch, len(job.ranks)):
                reason = "even split, bent to fit per-GPU caps"
            else:
                reason = "even split (DDP default)"
            out[job.job] = finalize(job, self.name, proposal, config, reason)
        return out


def balanced_split(job: JobState, share: np.ndarray) -> tuple[tuple[int, ...], float, float]:
    """Batches that make every rank finish together given its GPU share.

    Rank r takes (a_r + c_r b_r) / s_r seconds; equal times T with sum b = B
    gives T = (B + sum a/c) / sum(s/c). Returns (split, T_before, T_after)."""
    a = np.array([r.sec_per_step for r in job.ranks])
    c = np.array([r.sec_per_sample for r in job.ranks])
    s = np.maximum(share, 1e-9)
    t_eq = (job.global_batch + np.sum(a / c)) / np.sum(s / c)
    target = np.maximum((t_eq * s - a) / c, 0.0)
    split = round_split(list(target), job.global_batch, [r.cap for r in job.ranks])
    before = float(np.max((a + c * np.array(job.split)) / s))
    after = float(np.max((a + c * np.array(split)) / s))
    return split, before, after


class BalancePolicy:
    """Each job alone splits so that its ranks finish a step together."""

    name = "balance"

    def decide(self, cluster: ClusterState, config: PolicyConfig,
               warm: WarmStart | None = None) -> dict[str, Decision]:
        """Balance every multi-GPU job against the shares it gets now."""
        predicted = shared_rates(cluster.jobs)
        rates = current_rates(cluster)
        out = {}
        for j, job in enumerate(cluster.jobs):
            nums = {"sd_now": slowdown(job, float(rates[j])), "rate_now": float(rates[j])}
            if not job.splittable:
                out[job.job] = finalize(job, self.name, job.split, config, "", nums)
                continue
            split, before, after = balanced_split(job, predicted.shares[j])
            nums.update(step_s_now=before, step_s_predicted=after)
            reason = (f"straggler balancing: predicted step {before:.3g}s -> {after:.3g}s "
                      f"with GPU shares {[round(float(x), 2) for x in predicted.shares[j]]}")
            out[job.job] = finalize(job, self.name, split, config, reason, nums)
        return out
