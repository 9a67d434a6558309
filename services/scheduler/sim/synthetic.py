"""Synthetic cluster snapshots for decision-time benchmarks and tests: jobs
with random costs and progress, and the snapshot one scheduling period
later as a service would see it (splits applied, progress at the model's
speeds, re-measured costs, a few jobs replaced); and fleets of resident and
waiting jobs for the round planner."""

from __future__ import annotations

import dataclasses
import random
from typing import Mapping

from gpufair.scheduler.policy import (ClusterState, Decision, JobState, RankState, even_split,
                                      shared_rates)
from gpufair.scheduler.policy.fleet import FleetJob, Gpu


def _pick_gpus(n: int, load: list[int], rng: random.Random, node: int | None) -> list[int]:
    """The `n` least-loaded GPUs of the cluster (`node` None: a job may span
    any GPUs, so the job-GPU graph is a random expander), or of the
    least-loaded node of `node` GPUs (a job stays inside one node, as
    data-parallel jobs of up to a node's width are placed for NVLink)."""
    pool = range(len(load))
    if node is not None:
        first = min(range(0, len(load), node),
                    key=lambda f: (sum(sorted(load[f:f + node])[:n]), rng.random()))
        pool = range(first, first + node)
    return sorted(pool, key=lambda g: (load[g], rng.random()))[:n]


def _new_job(name: str, n_gpus: int, load: list[int], rng: random.Random,
             widths: tuple[int, int], node: int | None = None) -> JobState:
    """A job of widths[0]-widths[1] GPUs placed by `_pick_gpus` (updates
    `load`), random costs and progress, measured rates."""
    n = rng.randint(*widths)
    gpus = _pick_gpus(n, load, rng, node)
    for g in gpus:
        load[g] += 1
    big_b = 32 * n * rng.choice([1, 2, 4])
    ranks = tuple(RankState(f"g{g}", b, rng.uniform(1e-3, 2e-2), rng.uniform(0, 0.05))
                  for g, b in zip(gpus, even_split(big_b, n)))
    return JobState(name, big_b, ranks, rng.uniform(0, 1e6), 2e6, rng.uniform(0, 3600),
                    rng.uniform(10, 1000), None)


def synthetic_cluster(n_jobs: int, n_gpus: int, seed: int, widths: tuple[int, int] = (1, 8),
                      node: int | None = None) -> ClusterState:
    """`n_jobs` jobs from `_new_job`, placed one after another (seeded)."""
    rng, load = random.Random(seed), [0] * n_gpus
    return ClusterState(tuple(_new_job(f"j{j}", n_gpus, load, rng, widths, node)
                              for j in range(n_jobs)))


def next_period(cluster: ClusterState, decisions: Mapping[str, Decision], n_gpus: int,
                seed: int, widths: tuple[int, int], node: int | None = None,
                period_s: float = 60.0, noise: float = 0.02, churn: float = 0.01
                ) -> ClusterState:
    """The cluster one scheduling period later, as the service would see it:
    the decided splits applied, every job `period_s` further on at the speed
    the time-slicing model predicts, costs re-measured with `noise` relative
    error, and `churn` of the jobs (the furthest along) replaced by new ones
    (GPUs are read back from the "g<n>" names `synthetic_cluster` gives)."""
    rng = random.Random(seed)
    jobs = [dataclasses.replace(j, ranks=tuple(dataclasses.replace(r, batch=b) for r, b in
                                               zip(j.ranks, decisions[j.job].split)))
            for j in cluster.jobs]
    rates = shared_rates(jobs, [j.split for j in jobs]).rates
    moved = []
    for j, rate in zip(jobs, rates):
        ranks = tuple(dataclasses.replace(r, sec_per_sample=r.sec_per_sample * rng.gauss(1, noise),
                                          sec_per_step=r.sec_per_step * abs(rng.gauss(1, noise)))
                      for r in j.ranks)
        moved.append(dataclasses.replace(j, ranks=ranks, elapsed_s=j.elapsed_s + period_s,
                                         samples_done=min(j.samples_done + rate * period_s,
                                                          j.samples_total - 1)))
    gone = set(sorted(range(len(moved)), key=lambda i: -moved[i].samples_done)
               [:int(churn * len(moved))])
    kept = [j for i, j in enumerate(moved) if i not in gone]
    load = [0] * n_gpus
    for j in kept:
        for r in j.ranks:
            load[int(r.gpu[1:])] += 1
    fresh = [_new_job(f"new{seed}-{i}", n_gpus, load, rng, widths, node)
             for i in range(len(gone))]
    return ClusterState(tuple(kept + fresh))


def synthetic_fleet(n_jobs: int, n_gpus: int, seed: int, waiting: int = 0, node: int = 8
                    ) -> tuple[list[FleetJob], list[Gpu]]:
    """`n_jobs` resident jobs of 1-8 GPUs (most 1) spread least-loaded over
    `n_gpus` GPUs in nodes of `node`, with random costs and progress, plus
    `waiting` jobs that just arrived: the round planner's decision-time
    bench (seeded)."""
    rng = random.Random(seed)
    gpus = [Gpu(f"g{i}", f"n{i // node}") for i in range(n_gpus)]
    load = [0] * n_gpus
    jobs = []
    for j in range(n_jobs + waiting):
        n = rng.choice([1, 1, 1, 1, 2, 4, 8])
        batch = 32 * n
        rate = rng.uniform(50, 2000) * n  # samples/s alone
        total = rng.uniform(1e5, 1e7)
        step = batch / rate  # exclusive step time, a tenth of it fixed
        cost = dict(sec_per_sample=0.9 * step * n / batch, sec_per_step=0.1 * step)
        if j < n_jobs:
            on = sorted(range(n_gpus), key=lambda g: (load[g], rng.random()))[:n]
            for g in on:
                load[g] += 1
            jobs.append(FleetJob(f"j{j}", n, batch, rng.uniform(0, 3600), total, rate,
                                 samples_done=rng.uniform(0, 0.9 * total), model="m",
                                 gpus=tuple(f"g{g}" for g in on),
                                 split=even_split(batch, n), **cost))
        else:
            jobs.append(FleetJob(f"w{j}", n, batch, 3600.0, total, rate, model="m", **cost))
    return jobs, gpus
