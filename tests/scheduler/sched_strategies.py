"""Hypothesis strategies and helpers shared by the scheduler policy tests."""

from __future__ import annotations

import math
import os

from hypothesis import strategies as st

from gpufair.scheduler.policy import (ClusterState, JobState, RankState, even_split,
                                      exclusive_rate)
from gpufair.scheduler.policy.fleet import FleetJob


# The randomised LP checks (warm vs cold, optimum vs splits in force) run this
# many examples; the stress that found the numerical bugs of 2026-11-30 was
# GPUFAIR_STRESS_EXAMPLES=2000 .venv/bin/python -m pytest tests/scheduler -k stress
STRESS_EXAMPLES = int(os.environ.get("GPUFAIR_STRESS_EXAMPLES", "40"))


@st.composite
def clusters(draw, max_gpus: int = 5, max_jobs: int = 5, pins: bool = True) -> ClusterState:
    """Random small clusters: jobs on distinct GPUs with feasible caps."""
    n_gpu = draw(st.integers(2, max_gpus))
    jobs = []
    for j in range(draw(st.integers(1, max_jobs))):
        n = draw(st.integers(1, min(3, n_gpu)))
        gpus = draw(st.permutations(range(n_gpu)))[:n]
        big_b = draw(st.integers(n, 300))
        split = even_split(big_b, n)
        ranks = []
        for g, b in zip(gpus, split):
            cap = draw(st.one_of(st.none(), st.integers(math.ceil(big_b / n), big_b)))
            ranks.append(RankState(f"g{g}", b, draw(st.floats(1e-4, 0.1)),
                                   draw(st.floats(0.0, 0.05)), cap))
        pinned = None
        if pins and n > 1 and draw(st.booleans()) and draw(st.booleans()):
            pinned = tuple(reversed(split))
        jobs.append(JobState(f"j{j}", big_b, tuple(ranks), draw(st.floats(0, 1e5)), 1e5 + 1,
                             draw(st.floats(0, 1e4)), None,
                             draw(st.one_of(st.none(), st.floats(1.0, 1e5))), pinned))
    return ClusterState(tuple(jobs))


def rate_level(cluster: ClusterState, splits: list[tuple[int, ...]]) -> float:
    """Best min_j r_j / R_j reachable with these splits fixed: every GPU's
    time budget sum_j (a + c b) r_j / B_j <= 1 with r_j = t R_j."""
    load: dict[str, float] = {}
    for job, split in zip(cluster.jobs, splits):
        for rank, b in zip(job.ranks, split):
            load[rank.gpu] = load.get(rank.gpu, 0.0) + rank.step_time(b) * exclusive_rate(job) \
                / job.global_batch
    return min(1.0 / v for v in load.values())


class Models:
    """Jobs of models 'x' and 'y' cannot share a GPU; other pairs keep 0.7."""

    def efficiency(self, model, neighbours):
        return 0.7 if neighbours else 1.0

    def compatible(self, model, other):
        return {model, other} != {"x", "y"}


def make_job(name, gpus, arrival, total, done=0.0, on=(), model="m", rate=100.0):
    """A round planner's job on `gpus` GPUs: `total` samples at `rate` per GPU
    per second, resident on GPU names `on` (empty: waiting)."""
    batch = 16 * gpus
    return FleetJob(name, gpus, batch, arrival, total, rate * gpus, 0.008, 0.02, done, model,
                    rank_cap=2 * 16, gpus=tuple(on),
                    split=even_split(batch, gpus) if on else ())
