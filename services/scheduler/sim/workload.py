"""Job traces: gpufair's CSV and the AdaptDL/Pollux mixes.

gpufair format, header `job,arrival_s,model,num_gpus,global_batch,total_samples`
(`model` is the model part of a co-location job key).

AdaptDL format, header `name,time,application,num_replicas,batch_size`.
Those traces name applications, not Gavel models, and carry no amount of
work, so each application maps to the closest Gavel model (same task family)
and a fixed amount of work (dataset size x epochs), below.

Gavel's trace format (stanford-futuredata/gavel `scheduler/utils.py`,
`parse_trace`): no header, one job a line, tab-separated `job_type,
command, working_directory, num_steps_arg, needs_data_dir, total_steps,
scale_factor, priority_weight, SLO, arrival_time`, or 11 fields with `mode`
after `scale_factor`. `job_type` is the model ("ResNet-18 (batch size
64)"), `scale_factor` its GPUs. As in Gavel's throughput files
(`colocation.py`), every rank steps on the model's batch and steps count
over all ranks: the global batch is that batch x GPUs, the work
`total_steps` x the batch, and alone the job runs `total_steps` / the
file's steps/s at its GPU count. Jobs are named `job0000`,
`job0001`, ... by line; the command, directories, priority weight and SLO
are not simulated.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from gpufair.common.errors import InvalidArgument
from gpufair.scheduler.sim.colocation import model_family

GPUFAIR_HEADER = ("job", "arrival_s", "model", "num_gpus", "global_batch", "total_samples")
ADAPTDL_HEADER = ("name", "time", "application", "num_replicas", "batch_size")
#: Gavel's trace fields (`total_steps` and the fields after it are read).
GAVEL_FIELDS = ("job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir",
                "total_steps", "scale_factor", "priority_weight", "SLO", "arrival_time")
GAVEL_FIELDS_MODE = (*GAVEL_FIELDS[:7], "mode", *GAVEL_FIELDS[7:])

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
    return _checked(where, job)


def _checked(where: str, job: TraceJob) -> TraceJob:
    """`job` if it can run, else InvalidArgument naming `where`."""
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


def _gavel_row(where: str, line: int, index: int, rec: dict[str, str]) -> TraceJob:
    model = rec["job_type"].strip()
    gpus = int(_num(where, "scale_factor", rec["scale_factor"].strip(), True))
    steps = _num(where, "total_steps", rec["total_steps"].strip(), True)
    if gpus < 1 or steps < 1:
        raise InvalidArgument(f"{where}: scale_factor and total_steps must be >= 1, got "
                              f"{gpus} and {steps:g}")
    batch = model_family(model)[1]
    return _checked(where, TraceJob(f"job{index:04d}", _num(where, "arrival_time",
                                                          rec["arrival_time"].strip(), False),
                                    model, gpus, batch * gpus, steps * batch, line))


def _parse_gavel(text: str, source: str) -> tuple[TraceJob, ...]:
    jobs = []
    for line, raw in enumerate(text.split("\n"), 1):  # Gavel's own line breaks
        if not raw.strip():
            continue
        where = f"{source}:{line}"
        row = raw.rstrip().split("\t")  # arrival_time is last and never empty
        if len(row) not in (len(GAVEL_FIELDS), len(GAVEL_FIELDS_MODE)):
            raise InvalidArgument(f"{where}: a Gavel trace line has {len(GAVEL_FIELDS)} or "
                                  f"{len(GAVEL_FIELDS_MODE)} tab-separated fields, got {len(row)}")
        fields = GAVEL_FIELDS if len(row) == len(GAVEL_FIELDS) else GAVEL_FIELDS_MODE
        jobs.append(_gavel_row(where, line, len(jobs), dict(zip(fields, row))))
    return tuple(jobs)


def parse_workload(text: str, source: str = "<workload>") -> tuple[TraceJob, ...]:
    """Parse any of the three trace formats; errors name `source:line`."""
    first = next((raw for raw in text.splitlines() if raw.strip()), "")
    if "\t" in first:  # the CSV formats' headers have no tab
        return _parse_gavel(text, source)
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    cols = tuple(c.strip() for c in header) if header else ()
    if cols not in (GPUFAIR_HEADER, ADAPTDL_HEADER):
        raise InvalidArgument(f"{source}:1: header must be {','.join(GPUFAIR_HEADER)} "
                              f"or {','.join(ADAPTDL_HEADER)} (or no header and Gavel's "
                              f"tab-separated lines), got {','.join(cols) or 'nothing'}")
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
        text = Path(path).read_text(encoding="utf-8-sig")  # a byte-order mark is not a name
    except OSError as e:
        raise InvalidArgument(f"cannot read workload {path}: {e.strerror}") from None
    return parse_workload(text, str(path))
