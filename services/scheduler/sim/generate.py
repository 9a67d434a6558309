"""Synthetic job traces drawn the way Gavel's generator draws them
(stanford-futuredata/gavel, `scheduler/utils.py`, from Microsoft's Philly
trace), so any user can produce the standard workload for any GPU type:

- job type: uniform over the models the co-location file measures alone at
  1, 2, 4 and 8 GPUs on that GPU type;
- GPUs: 1, 2, 4 or 8 with probability 0.70, 0.10, 0.15, 0.05;
- exclusive duration: 10^U(1.5, 3) minutes with probability 0.8, else
  10^U(3, 4) minutes (30 minutes to a week);
- arrivals: a Poisson process, exponential gaps of mean `interarrival_s`,
  the first job at 0.

Each rank works on the model's measured batch size, so the global batch is
batch x GPUs, and `total_samples` = duration x the measured samples/s at
that GPU count: alone on its GPUs the job runs exactly `duration`.
"""

from __future__ import annotations

import csv
import io

import numpy as np

from gpufair.common.errors import InvalidArgument
from gpufair.scheduler.policy.model import even_split
from gpufair.scheduler.sim.colocation import Colocation
from gpufair.scheduler.sim.workload import GPUFAIR_HEADER, TraceJob

GENERATORS = ("gavel",)
SCALES = (1, 2, 4, 8)
SCALE_P = (0.70, 0.10, 0.15, 0.05)


def gavel_job_types(colocation: Colocation) -> tuple[str, ...]:
    """Models measured alone at every one of 1, 2, 4 and 8 GPUs, sorted."""
    return tuple(sorted(m for m in colocation.costs
                        if set(SCALES) <= set(colocation.scales_measured(m))))


def exclusive_samples_per_s(colocation: Colocation, model: str, num_gpus: int) -> float:
    """The measured speed of `model` alone on `num_gpus` GPUs, batch per rank as profiled."""
    cost = colocation.cost(model)
    batch = cost.profiled_batch * num_gpus
    return batch / cost.at(num_gpus).step_time(max(even_split(batch, num_gpus)))


def gavel_trace(colocation: Colocation, jobs: int, interarrival_s: float,
                seed: int) -> tuple[TraceJob, ...]:
    """`jobs` jobs drawn as the module docstring says (seeded)."""
    if jobs < 1 or not interarrival_s >= 0:
        raise InvalidArgument(f"need jobs >= 1 and interarrival >= 0, got {jobs} and "
                              f"{interarrival_s}")
    types = gavel_job_types(colocation)
    if not types:
        raise InvalidArgument(f"GPU type {colocation.gpu_type!r}: no model is measured alone "
                              f"at 1, 2, 4 and 8 GPUs")
    rng = np.random.default_rng(seed)
    out, now = [], 0.0
    for i in range(jobs):
        if i:
            now += float(rng.exponential(interarrival_s)) if interarrival_s > 0 else 0.0
        model = types[int(rng.integers(len(types)))]
        n = int(rng.choice(SCALES, p=SCALE_P))
        lo, hi = (3.0, 4.0) if rng.random() >= 0.8 else (1.5, 3.0)
        duration_s = 60.0 * 10 ** float(rng.uniform(lo, hi))
        batch = colocation.cost(model).profiled_batch * n
        out.append(TraceJob(f"job{i:04d}", round(now, 3), model, n, batch,
                            duration_s * exclusive_samples_per_s(colocation, model, n),
                            i + 2))
    return tuple(out)


def to_csv(trace: tuple[TraceJob, ...]) -> str:
    """The trace in gpufair's CSV format (`sim/workload.py` reads it back)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(GPUFAIR_HEADER)
    for j in trace:
        writer.writerow([j.job, f"{j.arrival_s:.3f}", j.model, j.num_gpus, j.global_batch,
                         f"{j.total_samples:.10g}"])
    return buf.getvalue()
