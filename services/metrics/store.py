"""The metrics service's state: per-rank windows and the queries over them (pure)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpufair.common.errors import InvalidArgument, NotFound
from gpufair.metrics.core import (
    HOLDS_BACK,
    DeviceStats,
    JobInfo,
    JobStats,
    Occupant,
    RankKey,
    RankStats,
    RankWindow,
    Record,
    _rate,
    fit_cost,
)


@dataclass(frozen=True)
class IngestResult:
    accepted: int
    rejected: int
    error: str = ""


class MetricsStore:
    """Holds recent telemetry of every (job, rank); all methods are cheap and synchronous.

    `window_s` bounds what the statistics look at; `short_s` is the "now" rate's
    window; `expire_s` forgets ranks that stopped reporting.
    """

    def __init__(self, *, window_s: float = 30.0, short_s: float = 5.0, expire_s: float = 300.0, clock: Callable[[], float] = time.time) -> None:
        self.window_s, self.short_s, self.expire_s = window_s, short_s, expire_s
        self._clock = clock
        self._ranks: dict[RankKey, RankWindow] = {}
        self._jobs: dict[str, JobInfo] = {}
        self.records_total = 0
        self.rejected_total = 0

    def ingest(self, job: str, rank: int, node: str, device_id: str, global_batch: int, total_samples: int, dropped_total: int,
               records: Iterable[Record], incarnation: int = 0) -> IngestResult:
        """Append validated records of one rank; out-of-order or backwards records are rejected."""
        key = RankKey(job, rank)
        win = self._ranks.get(key)
        if win is None:
            win = self._ranks[key] = RankWindow()
        info = self._jobs.setdefault(job, JobInfo())
        if global_batch:
            info.global_batch = global_batch
        if total_samples:
            info.total_samples = total_samples
        win.node, win.device_id = node or win.node, device_id or win.device_id
        win.heard_at = self._clock()
        win.dropped_total = max(win.dropped_total, dropped_total)
        accepted = rejected = 0
        error = ""
        if incarnation != win.incarnation:
            # A new trainer process (resumed from a checkpoint, maybe at an earlier
            # step): its local counters start again, so the window does too.
            win.records.clear()
            win.last_step, win.samples_total, win.incarnation = -1, 0, incarnation
        for r in records:
            if r.step <= win.last_step or r.samples_total < win.samples_total:
                rejected += 1
                error = error or (f"record for step {r.step} is not after step {win.last_step} "
                                  f"(or its counters went backwards): already reported")
                continue
            win.records.append(r)
            win.samples_total, win.steps_total, win.last_step = r.samples_total, r.steps_total, r.step
            win.first_t = min(win.first_t, r.t)
            accepted += 1
        self._trim(win)
        self.records_total += accepted
        self.rejected_total += rejected
        return IngestResult(accepted, rejected, error)

    def _trim(self, win: RankWindow) -> None:
        if not win.records:
            return
        horizon = win.records[-1].t - self.window_s
        while len(win.records) > 2 and win.records[0].t < horizon:
            win.records.popleft()

    def expire(self) -> int:
        """Forget ranks silent for longer than `expire_s`; returns how many."""
        cutoff = self._clock() - self.expire_s
        gone = [k for k, w in self._ranks.items() if not w.records or w.records[-1].t < cutoff]
        for k in gone:
            del self._ranks[k]
        live_jobs = {k.job for k in self._ranks}
        for job in set(self._jobs) - live_jobs:
            del self._jobs[job]
        return len(gone)

    # --- queries -----------------------------------------------------------

    def job_ids(self) -> list[str]:
        return sorted(self._jobs)

    def job(self, job: str) -> JobStats:
        if job not in self._jobs:
            raise NotFound(f"no telemetry for job {job!r}")
        ranks = sorted((k.rank, w) for k, w in self._ranks.items() if k.job == job)
        stats = tuple(self._rank_stats(rank, w) for rank, w in ranks)
        info = self._jobs[job]
        # Every global batch keeps its size, so steps x global batch is exact and
        # survives trainer restarts; local sample counters are only a fallback.
        steps = min((w.steps_total for _, w in ranks), default=0)
        done = steps * info.global_batch if info.global_batch else sum(s.samples_total for s in stats)
        step_time = sum(s.step_time_s for s in stats)
        stall = sum(s.data_stall_fraction * s.step_time_s for s in stats) / step_time if step_time > 0 else 0.0
        return JobStats(
            job_id=job,
            global_batch=info.global_batch,
            samples_per_s=sum(_rate(self._recent(w)) for _, w in ranks),
            samples_per_s_smoothed=sum(s.samples_per_s for s in stats),
            samples_done=done,
            samples_total=info.total_samples,
            progress=min(done / info.total_samples, 1.0) if info.total_samples else 0.0,
            steps_done=steps,
            data_stall_fraction=stall,
            first_t=min((w.first_t for _, w in ranks), default=0.0),
            last_t=max((w.records[-1].t for _, w in ranks if w.records), default=0.0),
            ranks=stats,
        )

    def jobs(self) -> list[JobStats]:
        return [self.job(j) for j in self.job_ids()]

    def devices(self) -> list[DeviceStats]:
        by_device: dict[str, list[tuple[RankKey, RankWindow]]] = {}
        per_step: dict[RankKey, float] = {}
        for key, win in self._ranks.items():
            per_step[key] = _compute_per_step(win)
            if win.device_id:
                by_device.setdefault(win.device_id, []).append((key, win))
        fastest: dict[str, float] = {}
        for key, t in per_step.items():
            if t > 0:
                fastest[key.job] = min(fastest.get(key.job, t), t)
        out = []
        now = self._clock()
        for device_id, everyone in sorted(by_device.items()):
            # Its occupants now: the ranks heard from within the window (an ended job's
            # ranks stay known to `job` until `expire_s`, but are no longer on the device).
            members = [(k, w) for k, w in everyone if now - w.heard_at <= self.window_s]
            occupants = tuple(sorted(
                (Occupant(k.job, k.rank, self._busy(w), per_step[k],
                          per_step[k] > HOLDS_BACK * fastest.get(k.job, float("inf"))) for k, w in members),
                key=lambda o: (o.job, o.rank)))
            readings = [w.records[-1] for _, w in members if w.records and w.records[-1].util_percent is not None]
            if readings:
                latest = max(readings, key=lambda r: r.t)
                util, mem, source = float(latest.util_percent or 0.0), latest.memory_used, latest.source
            else:
                util, mem, source = min(100.0, 100.0 * sum(o.busy_fraction for o in occupants)), 0, 0
            out.append(DeviceStats(device_id, everyone[0][1].node, util, occupants, mem, source))
        return out

    def _recent(self, win: RankWindow) -> list[Record]:
        if not win.records:
            return []
        horizon = win.records[-1].t - self.short_s
        recent = [r for r in win.records if r.t >= horizon]
        return recent if len(recent) >= 2 else list(win.records)[-2:]

    @staticmethod
    def _busy(win: RankWindow) -> float:
        recs = win.records
        if len(recs) < 2 or recs[-1].t <= recs[0].t:
            return 0.0
        return min(1.0, sum(r.compute_s for r in list(recs)[1:]) / (recs[-1].t - recs[0].t))

    def _rank_stats(self, rank: int, win: RankWindow) -> RankStats:
        recs = list(win.records)
        a, c = fit_cost(recs)
        span = recs[-1].t - recs[0].t if len(recs) >= 2 else 0.0
        steps = recs[-1].step - recs[0].step if len(recs) >= 2 else 0
        step_time = span / steps if steps > 0 else (recs[-1].compute_s + recs[-1].data_wait_s if recs else 0.0)
        wait = sum(r.data_wait_s for r in recs[1:])
        return RankStats(
            rank=rank,
            node=win.node,
            device_id=win.device_id,
            local_batch=recs[-1].local_batch if recs else 0,
            compute_s_per_sample=c,
            compute_s_fixed=a,
            step_time_s=step_time,
            data_stall_fraction=min(1.0, wait / span) if span > 0 else 0.0,
            samples_total=win.samples_total,
            last_step=win.last_step,
            last_t=recs[-1].t if recs else 0.0,
            dropped_total=win.dropped_total,
            samples_per_s=_rate(win.records),
            busy_fraction=self._busy(win),
        )


def _compute_per_step(win: RankWindow) -> float:
    """Mean compute seconds per step over the window (0 if none): in a synchronous job the
    rank with the most holds the others back."""
    recs = list(win.records)[-64:]
    return sum(r.compute_s for r in recs) / len(recs) if recs else 0.0


def require_job(store: MetricsStore, job: str) -> JobStats:
    if not job:
        raise InvalidArgument("job_id is required")
    return store.job(job)
