"""From registry views, metrics and profiles to the policy core's `ClusterState` (pure).

Which numbers feed a job's state, in order of preference:
- per-rank cost: the metrics service's fitted compute cost (GPU-busy seconds per
  sample and per step); else the profile's t(b) = a + c*b for the rank's device type,
  with the sync cost its multi-device measurements give at the job's rank count;
- exclusive rate: the spec's override; else the profile at the even split (sync
  included); else
  the policy core's documented fallback (best observed cost, never understating SD);
- a job with no cost from either source, no live rank, or all work done is
  left out of the round (its split stays, its GPUs count as free);
- elapsed time: from the start the scheduler recorded in etcd (the job's
  first join), never from the metrics service's windows, which a restart of
  that service resets.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from gpufair.common.steptime import StepTimeModel
from gpufair.scheduler.jobindex import JobView
from gpufair.scheduler.jobs import JobSpec
from gpufair.scheduler.policy import ClusterState, JobState, RankState, even_split, exclusive_rate, slowdown


@dataclass(frozen=True)
class RankMetrics:
    compute_s_per_sample: float
    compute_s_fixed: float
    last_step: int


@dataclass(frozen=True)
class JobMetrics:
    samples_per_s: float
    samples_done: int
    first_unix_s: float
    ranks: Mapping[int, RankMetrics]
    last_unix_s: float = 0.0

    @property
    def last_step(self) -> int:
        return max((r.last_step for r in self.ranks.values()), default=-1)


#: Step-time fits of the stored profiles, by (model, device type).
Profiles = Mapping[tuple[str, str], StepTimeModel]


@dataclass(frozen=True)
class JobEstimate:
    """What the admin view shows of a job."""

    job: str
    rate: float
    exclusive_rate: float
    exclusive_source: str
    slowdown: float
    progress: float
    elapsed_s: float
    included: bool
    why_excluded: str = ""
    samples_done: int = 0
    last_step_unix_s: float = 0.0  # the latest step the metrics service heard of (0: none)


def _profile_exclusive(spec: JobSpec, profiles: Profiles) -> float | None:
    if not profiles:
        return None
    fits = [profiles.get((spec.model, r.device_type)) for r in spec.ranks]
    if any(f is None for f in fits):
        return None
    sizes = even_split(spec.global_batch, len(spec.ranks))
    n = len(spec.ranks)  # the fit's sync cost at this scale, as measured by the profiler
    step = max(f.step_s(b, n) for f, b in zip(fits, sizes))  # type: ignore[union-attr]
    return spec.global_batch / step if step > 0 else None


def _rank_states(view: JobView, m: JobMetrics | None, profiles: Profiles) -> tuple[RankState, ...] | None:
    if m is None and not profiles:
        return None  # no cost from either source
    split = view.split.batch_sizes if view.split else even_split(view.spec.global_batch, len(view.spec.ranks))
    out = []
    for p, b in zip(sorted(view.spec.ranks, key=lambda r: r.rank), split):
        rm = m.ranks.get(p.rank) if m else None
        fit = profiles.get((view.spec.model, p.device_type))
        if rm and rm.compute_s_per_sample > 0 and math.isfinite(rm.compute_s_per_sample):
            c, a = rm.compute_s_per_sample, max(rm.compute_s_fixed, 0.0)
        elif fit and fit.c_s > 0:
            a, c = fit.costs(len(view.spec.ranks))
        else:
            return None
        out.append(RankState(gpu=p.device_id, batch=b, sec_per_sample=c, sec_per_step=a, cap=p.max_batch or None))
    return tuple(out)


def _elapsed(view: JobView, m: JobMetrics | None, progress: float, now: float) -> float:
    """Seconds since the job started; a job whose work is done stops its clock at its last step."""
    until = m.last_unix_s if m and progress >= 1.0 and m.last_unix_s > 0 else now
    if view.life is not None:
        return max(until - view.life.started_unix_s, 0.0) if view.life.started_unix_s > 0 else 0.0
    # A job registered before lives were recorded: only the metrics service knows when it began.
    return max(until - m.first_unix_s, 0.0) if m and m.first_unix_s > 0 else 0.0


def build_snapshot(views: list[JobView], metrics: Mapping[str, JobMetrics], profiles: Profiles, now: float) -> tuple[ClusterState, dict[str, JobEstimate]]:
    """The policy's input and, for every registered job, the numbers shown to operators."""
    jobs: list[JobState] = []
    estimates: dict[str, JobEstimate] = {}
    for view in views:
        spec, m = view.spec, metrics.get(view.spec.job_id)
        done = m.samples_done if m else 0
        progress = min(done / spec.total_samples, 1.0)
        elapsed = _elapsed(view, m, progress, now)
        exclusive, source = (spec.exclusive_rate, "spec") if spec.exclusive_rate > 0 else (_profile_exclusive(spec, profiles), "profile")
        ranks = _rank_states(view, m, profiles)
        why = ""
        if view.live_ranks == 0:
            why = "no live rank"
        elif progress >= 1.0:
            why = "finished"
        elif ranks is None:
            why = "no telemetry or profile yet"
        rate = m.samples_per_s if m and m.samples_per_s > 0 else None
        last_step = m.last_unix_s if m else 0.0
        if ranks is None:
            estimates[spec.job_id] = JobEstimate(spec.job_id, rate or 0.0, exclusive or 0.0, source if exclusive else "unknown", 0.0,
                                                 progress, elapsed, False, why, done, last_step)
            continue
        state = JobState(job=spec.job_id, global_batch=spec.global_batch, ranks=ranks, samples_done=float(done),
                         samples_total=float(spec.total_samples), elapsed_s=elapsed, rate=rate,
                         exclusive_rate=exclusive, pinned=view.pinned)
        ex = exclusive_rate(state)
        if progress >= 1.0:
            sd = elapsed / (spec.total_samples / ex) if ex > 0 else 0.0
        else:
            sd = slowdown(state, rate) if rate else 0.0
        # SD below 1 is impossible by definition: it means the exclusive speed is underestimated.
        sd = max(sd, 1.0) if math.isfinite(sd) and sd > 0 else 0.0
        estimates[spec.job_id] = JobEstimate(spec.job_id, rate or 0.0, ex, source if exclusive else "observed", sd,
                                             progress, elapsed, not why, why, done, last_step)
        if not why:
            jobs.append(state)
    return ClusterState(tuple(jobs)), estimates
