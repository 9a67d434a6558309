"""Rolling windows of trainer telemetry and the statistics derived from them (pure).

Counters in records are cumulative, so a lost record or a restarted service
loses no progress: the next record carries the totals again.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from gpufair.common.errors import InvalidArgument
from gpufair.common.keys import check_segment
from gpufair.common.limits import MAX_BATCH, MAX_RANK, MAX_SAMPLES, MAX_STEPS

MAX_RECORDS_PER_BATCH = 10_000


@dataclass(frozen=True)
class Record:
    """One step of one rank, validated."""

    step: int
    local_batch: int
    compute_s: float
    data_wait_s: float
    samples_total: int
    steps_total: int
    t: float
    util_percent: float | None = None
    memory_used: int = 0
    source: int = 0


@dataclass(frozen=True)
class RankKey:
    job: str
    rank: int


@dataclass
class RankWindow:
    """Recent records of one rank plus its latest identity and counters."""

    node: str = ""
    device_id: str = ""
    records: deque[Record] = field(default_factory=lambda: deque(maxlen=512))
    samples_total: int = 0
    steps_total: int = 0
    last_step: int = -1
    dropped_total: int = 0
    first_t: float = math.inf
    incarnation: int = 0
    heard_at: float = 0.0  # the service's clock at this rank's last report


@dataclass
class JobInfo:
    global_batch: int = 0
    total_samples: int = 0


@dataclass(frozen=True)
class RankStats:
    rank: int
    node: str
    device_id: str
    local_batch: int
    compute_s_per_sample: float
    compute_s_fixed: float
    step_time_s: float
    data_stall_fraction: float
    samples_total: int
    last_step: int
    last_t: float
    dropped_total: int
    samples_per_s: float
    busy_fraction: float


@dataclass(frozen=True)
class JobStats:
    job_id: str
    global_batch: int
    samples_per_s: float
    samples_per_s_smoothed: float
    samples_done: int
    samples_total: int
    progress: float
    steps_done: int
    data_stall_fraction: float
    first_t: float
    last_t: float
    ranks: tuple[RankStats, ...]


@dataclass(frozen=True)
class Occupant:
    """One rank on a device: its busy share, its compute per step, and whether it
    is its job's straggler (HOLDS_BACK slower than the job's fastest rank)."""

    job: str
    rank: int
    busy_fraction: float
    compute_s_per_step: float = 0.0
    holds_back: bool = False


#: A rank this much slower per step than its job's fastest rank holds the job back.
HOLDS_BACK = 1.10


@dataclass(frozen=True)
class DeviceStats:
    device_id: str
    node: str
    utilization_percent: float
    occupants: tuple[Occupant, ...]
    memory_used: int
    source: int


def _finite(name: str, value: float, lo: float = 0.0, hi: float = 1e9) -> float:
    if not (math.isfinite(value) and lo <= value <= hi):
        raise InvalidArgument(f"{name}={value!r} is out of range [{lo}, {hi}]")
    return value


def validate_header(job_id: str, rank: int, node: str, device_id: str, global_batch: int, total_samples: int, n_records: int) -> None:
    """Check a batch's identity fields; raises InvalidArgument naming the field."""
    try:
        check_segment("job_id", job_id)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    if not 0 <= rank <= MAX_RANK:
        raise InvalidArgument(f"rank={rank} is out of range [0, {MAX_RANK}]")
    if len(node) > 253 or len(device_id) > 253:
        raise InvalidArgument("node and device_id must be at most 253 characters")
    if not 0 <= global_batch <= MAX_BATCH:
        raise InvalidArgument(f"global_batch={global_batch} is out of range [0, {MAX_BATCH}]")
    if total_samples < 0:
        raise InvalidArgument(f"total_samples={total_samples} must not be negative")
    if n_records > MAX_RECORDS_PER_BATCH:
        raise InvalidArgument(f"{n_records} records in one batch; at most {MAX_RECORDS_PER_BATCH}")


def make_record(step: int, local_batch: int, compute_s: float, data_wait_s: float, samples_total: int, steps_total: int, t: float,
                util: float | None = None, memory_used: int = 0, source: int = 0) -> Record:
    """Validate one record's fields; raises InvalidArgument naming the field."""
    if step < 0 or steps_total < 0 or samples_total < 0:
        raise InvalidArgument(f"step={step}, steps_total={steps_total}, samples_total={samples_total} must not be negative")
    if max(step, steps_total) > MAX_STEPS or samples_total > MAX_SAMPLES:
        raise InvalidArgument(f"step={step}, steps_total={steps_total}, samples_total={samples_total}: at most "
                              f"{MAX_STEPS} steps and {MAX_SAMPLES} samples per rank")
    if not 0 <= local_batch <= MAX_BATCH:
        raise InvalidArgument(f"local_batch={local_batch} is out of range [0, {MAX_BATCH}]")
    _finite("compute_s", compute_s, hi=86_400)
    _finite("data_wait_s", data_wait_s, hi=86_400)
    _finite("unix_time_s", t, hi=1e11)
    if util is not None:
        _finite("utilization_percent", util, hi=100.0)
    return Record(step, local_batch, compute_s, data_wait_s, samples_total, steps_total, t, util, memory_used, source)


def fit_cost(records: list[Record]) -> tuple[float, float]:
    """Least-squares fit compute_s = a + c * local_batch; (a, c), both >= 0."""
    pts = [(r.local_batch, r.compute_s) for r in records if r.local_batch > 0]
    if not pts:
        return 0.0, 0.0
    n = len(pts)
    mb = sum(b for b, _ in pts) / n
    mt = sum(t for _, t in pts) / n
    var = sum((b - mb) ** 2 for b, _ in pts)
    if var < 1e-9 * max(mb * mb, 1.0):
        return 0.0, mt / mb  # one batch size seen: all cost is per-sample
    c = sum((b - mb) * (t - mt) for b, t in pts) / var
    a = mt - c * mb
    if c <= 0 or a < 0:
        return 0.0, mt / mb  # noise made the fit unphysical; fall back to the mean
    return a, c


def _rate(records: deque[Record] | list[Record]) -> float:
    if len(records) < 2:
        return 0.0
    first, last = records[0], records[-1]
    dt = last.t - first.t
    return (last.samples_total - first.samples_total) / dt if dt > 0 else 0.0
