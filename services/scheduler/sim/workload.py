"""Job traces: gpufair's CSV and the AdaptDL/Pollux mixes.

gpufair format, header `job,arrival_s,model,num_gpus,global_batch,total_samples`
(`model` is the model part of a co-location job key).

AdaptDL format, header `name,time,application,num_replicas,batch_size`.
Those traces name applications, not Gavel models, and carry no amount of
work, so each application maps to the closest Gavel model (same task family)
and a fixed amount of work (dataset size x epochs), below.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from gpufair.common.errors import InvalidArgument

GPUFAIR_HEADER = ("job", "arrival_s", "model", "num_gpus", "global_batch", "total_samples")
ADAPTDL_HEADER = ("name", "time", "application", "num_replicas", "batch_size")

#: application -> (Gavel model, total samples). Same task family; work is
#: dataset size x epochs of the AdaptDL/Pollux benchmark it names.
ADAPTDL_MODELS = MappingProxyType({
    "cifar10": ("ResNet-18 (batch size 128)", 50_000 * 20),      # CIFAR-10, 20 epochs
    "imagenet": ("ResNet-50 (batch size 64)", 1_281_167),         # ImageNet, 1 epoch
    "bert": ("Transformer (batch size 64)", 88_000 * 2),          # SQuAD, 2 epochs
    "deepspeech2": ("LM (batch size 20)", 28_000 * 8),            # CMU-ARCTIC-size, 8 epochs
    "ncf": ("Recommendation (batch size 2048)", 1_000_209 * 10),  # MovieLens-1M, 10 epochs
    "yolov3": ("ResNet-50 (batch size 32)", 16_551 * 10),         # PASCAL VOC, 10 epochs
})


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace, with the source line for error messages."""

    job: str
    arrival_s: float
    model: str
    num_gpus: int
    global_batch: int
    total_samples: float
    line: int


def _num(where: str, name: str, text: str, integer: bool) -> float:
    try:
        value = int(text) if integer else float(text)
    except (TypeError, ValueError):
        raise InvalidArgument(f"{where}: {name} {text!r} is not a"
                              f"{'n integer' if integer else ' number'}") from None
    if not math.isfinite(value) or value < 0:
        raise InvalidArgument(f"{where}: {name} {text!r} must be a finite number >= 0")
    return value


def _row(where: str, line: int, rec: dict[str, str], adaptdl: bool) -> TraceJob:
    if adaptdl:
        app = (rec["application"] or "").strip()
        if app not in ADAPTDL_MODELS:
            raise InvalidArgument(f"{where}: unknown application {app!r} (known: "
                                  f"{', '.join(sorted(ADAPTDL_MODELS))})")
        model, total = ADAPTDL_MODELS[app]
        job = TraceJob(rec["name"].strip(), _num(where, "time", rec["time"], False), model,
                       int(_num(where, "num_replicas", rec["num_replicas"], True)),
                       int(_num(where, "batch_size", rec["batch_size"], True)), float(total), line)
    else:
        job = TraceJob(rec["job"].strip(), _num(where, "arrival_s", rec["arrival_s"], False),
                       rec["model"].strip(), int(_num(where, "num_gpus", rec["num_gpus"], True)),
                       int(_num(where, "global_batch", rec["global_batch"], True)),
                       _num(where, "total_samples", rec["total_samples"], False), line)
    if not job.job:
        raise InvalidArgument(f"{where}: empty job name")
    if job.num_gpus < 1:
        raise InvalidArgument(f"{where}: num_gpus must be >= 1")
    if job.global_batch < job.num_gpus:
        raise InvalidArgument(f"{where}: global batch {job.global_batch} is smaller than "
                              f"its {job.num_gpus} GPUs (each needs >= 1 sample)")
    if job.total_samples <= 0:
        raise InvalidArgument(f"{where}: total_samples must be > 0")
    return job


def parse_workload(text: str, source: str = "<workload>") -> tuple[TraceJob, ...]:
    """Parse either trace format; errors name `source:line`."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    cols = tuple(c.strip() for c in header) if header else ()
    if cols not in (GPUFAIR_HEADER, ADAPTDL_HEADER):
        raise InvalidArgument(f"{source}:1: header must be {','.join(GPUFAIR_HEADER)} "
                              f"or {','.join(ADAPTDL_HEADER)}, got {','.join(cols) or 'nothing'}")
    jobs, names = [], set()
    for row in reader:
        line = reader.line_num
        if not row or all(not c.strip() for c in row):
            continue
        where = f"{source}:{line}"
        if len(row) != len(cols):
            raise InvalidArgument(f"{where}: expected {len(cols)} fields, got {len(row)}")
        job = _row(where, line, dict(zip(cols, row)), cols == ADAPTDL_HEADER)
        if job.job in names:
            raise InvalidArgument(f"{where}: job {job.job!r} appears twice")
        names.add(job.job)
        jobs.append(job)
    if not jobs:
        raise InvalidArgument(f"{source}: the trace has no jobs")
    return tuple(jobs)


def load_workload(path: str | Path) -> tuple[TraceJob, ...]:
    """Read and parse a trace file."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise InvalidArgument(f"cannot read workload {path}: {e.strerror}") from None
    return parse_workload(text, str(path))
