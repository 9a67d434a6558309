"""The benchmark's inputs: co-location files, the shared AdaptDL mixes (made
contended) and any trace file, read before anything is simulated."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

from gpufair.common.errors import InvalidArgument
from gpufair.scheduler.sim import Colocation, TraceJob, gpu_types, load_colocation, load_workload


def mixes(trace: tuple[TraceJob, ...], max_replicas: int, speedup: float,
          seed: int) -> dict[str, tuple[TraceJob, ...]]:
    """Two mixes from one trace, arrivals divided by `speedup` (so the cluster
    contends) and replicas capped: mostly multi-GPU (every multi-GPU job, 1
    in 4 single-GPU jobs) and mostly single-GPU (the reverse)."""
    rng = random.Random(seed)
    jobs = [dataclasses.replace(j, num_gpus=min(j.num_gpus, max_replicas),
                                arrival_s=j.arrival_s / speedup) for j in trace]
    keep = {j.job: rng.random() < 0.25 for j in jobs}
    multi = tuple(j for j in jobs if j.num_gpus > 1 or keep[j.job])
    single = tuple(j for j in jobs if j.num_gpus == 1 or keep[j.job])
    return {"multi-GPU": multi, "1-GPU": single}


def traces(data: str, workloads: str) -> list[tuple[str, int, tuple[TraceJob, ...]]]:
    """(label, seed, trace) per comma-separated entry: N names the shared
    AdaptDL mix N ("wN", seed N), anything else a trace file (its stem, seed
    = its position)."""
    out = []
    for pos, item in enumerate(workloads.split(","), 1):
        if item.isdigit():
            path = Path(data) / "workloads" / f"adaptdl-workload-{item}.csv"
            out.append((f"w{item}", int(item), load_workload(path)))
        else:
            out.append((Path(item).stem, pos, load_workload(item)))
    labels = [label for label, _, _ in out]
    if len(set(labels)) != len(labels):
        raise InvalidArgument(f"--workloads: two traces share a name ({', '.join(labels)})")
    return out


def colocations(data: str, path: str | None, names: str | None) -> list[tuple[str, Colocation]]:
    """(GPU type, model) per type `names` lists, default every type in the file."""
    path = path or str(Path(data) / "colocation" / "gavel-physical-k80-p100.json")
    types = names.split(",") if names else gpu_types(path)
    return [(gpu_type, load_colocation(path, gpu_type)) for gpu_type in types]
