"""From the registry, the latest figures and the waiting submissions to the
round planner's input (`policy.FleetJob`, `policy.Gpu`) (pure).

- A registered job is resident on the devices its ranks reported; a
  submission waits for `num_gpus` of the devices it offered, and once
  placed holds them (resident) until its trainers register.
- Costs: the decision round's per-rank costs where the job has them
  (telemetry or profile); else derived from its exclusive speed with a
  tenth of the step fixed; a job with no known speed at all (held since it
  registered, no profile, no figure from its submitter) counts as
  `UNKNOWN_ALONE_S` of work alone, so it is neither starved nor rushed.
- Starting jobs (placed, or let run more than `STARTUP_GRACE_S` ago, at
  registration or released from a hold, with no step reported yet) are not
  `ready`: the round gives their GPUs' time to others until they step
  (torchrun and imports take seconds).
- Arrival: when the job was submitted, else registered; slow-down counts
  the wait from there, less the job's start-up (placement to registration:
  torchrun, imports, which no policy controls): a placed job's clock stands
  still until it registers (`startup_excluded`), so a slow start does not
  make it urgent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpufair.scheduler.jobindex import JobView
from gpufair.scheduler.policy.fleet import UNKNOWN_ALONE_S, FleetJob, Gpu
from gpufair.scheduler.policy.model import even_split
from gpufair.scheduler.policy.types import ClusterState
from gpufair.scheduler.snapshot import JobEstimate
from gpufair.scheduler.submissions import Submission

#: A registered job steps within this long as a rule (its trainers register just
#: before training): it gets its time at once, so the jobs it holds stop before its
#: first step instead of slowing it for a round or two. One that has not stepped
#: by then is still starting (loading data, say), and its GPUs' time goes to others.
STARTUP_GRACE_S = 5.0


@dataclass(frozen=True)
class Fleet:
    """The planner's input: every job (registered ones first, by id) and every GPU."""

    jobs: tuple[FleetJob, ...]
    gpus: tuple[Gpu, ...]
    submissions: Mapping[str, Submission]  # the waiting ones, by job
    starting: frozenset[str] = frozenset()  # placed submissions whose trainers have not registered
    unstarted: frozenset[str] = frozenset()  # let run over STARTUP_GRACE_S ago, no step reported yet


def _costs(batch: int, gpus: int, exclusive_rate: float) -> tuple[float, float]:
    """(sec_per_step, sec_per_sample) of a rank whose job runs at `exclusive_rate`
    at the even split, a tenth of the step fixed."""
    step = batch / exclusive_rate
    return 0.1 * step, 0.9 * step / max(even_split(batch, gpus))


def _speed(total: float, exclusive_rate: float) -> tuple[float, float, bool]:
    """(total samples, exclusive rate, whether the length is known), unknowns
    filled as the module says."""
    if exclusive_rate > 0 and total > 0:
        return total, exclusive_rate, True
    if exclusive_rate > 0:
        return exclusive_rate * UNKNOWN_ALONE_S, exclusive_rate, False
    total = total if total > 0 else UNKNOWN_ALONE_S
    return total, total / UNKNOWN_ALONE_S, False


def startup_excluded(s: Submission, now: float) -> float:
    """A submitted job's arrival as slow-down counts it at `now` (module docstring)."""
    return s.submitted_unix_s + max(now - s.placed_unix_s, 0.0) if s.placed else s.submitted_unix_s


def _let_run_since(view: JobView) -> float:
    """When the job was last told to run: registered, or released from a hold
    (a job held before its first step starts only then); 0 if unknown."""
    registered = view.life.registered_unix_s if view.life is not None else 0.0
    split = view.split
    return max(registered, split.issued_unix_s if split is not None and not split.held else 0.0)


def build_fleet(views: Sequence[JobView], estimates: Mapping[str, JobEstimate], cluster: ClusterState,
                submissions: Sequence[Submission], now: float) -> Fleet:
    """The active registered jobs and the unplaced submissions (module docstring)."""
    decided = {j.job: j for j in cluster.jobs}
    unstarted = frozenset(v.spec.job_id for v in views if v.active and not (
        estimates.get(v.spec.job_id) and estimates[v.spec.job_id].samples_done > 0) and (
        now - _let_run_since(v) > STARTUP_GRACE_S))
    jobs, gpus = [], {}
    for view in sorted((v for v in views if v.active), key=lambda v: v.spec.job_id):
        spec, est = view.spec, estimates.get(view.spec.job_id)
        ranks = sorted(spec.ranks, key=lambda r: r.rank)
        for r in ranks:
            gpus.setdefault(r.device_id, Gpu(r.device_id, r.node))
        n, batch = len(ranks), spec.global_batch
        total, rate, known = _speed(spec.total_samples,
                                    est.exclusive_rate if est else spec.exclusive_rate)
        state = decided.get(spec.job_id)
        if state is not None:
            step, sample = state.ranks[0].sec_per_step, state.ranks[0].sec_per_sample
        else:
            step, sample = _costs(batch, n, rate)
        life = view.life
        arrival = life.registered_unix_s if life is not None else 0.0
        split = view.split.batch_sizes if view.split else even_split(batch, n)
        caps = [r.max_batch for r in ranks if r.max_batch > 0]
        # Still starting: told to run but no step yet (a job held before its first step is not).
        not_ready = spec.job_id in unstarted and not (view.split and view.split.held)
        jobs.append(FleetJob(spec.job_id, n, batch, arrival, float(total), rate, sample, step,
                             min(float(est.samples_done) if est else 0.0, float(total) * 0.999999),
                             spec.model, min(caps) if caps else None,
                             tuple(r.device_id for r in ranks), tuple(split), ready=not not_ready,
                             length_known=known))
    waiting = {}
    for s in sorted(submissions, key=lambda s: s.job_id):
        for d in s.devices:
            gpus.setdefault(d, Gpu(d, s.node))
        total, rate, known = _speed(s.total_samples, s.exclusive_rate)
        step, sample = _costs(s.global_batch, s.num_gpus, rate)
        # A placed submission holds its GPUs while its trainers start.
        placed = dict(gpus=s.placed, split=even_split(s.global_batch, s.num_gpus)) if s.placed else {}
        if not s.placed:
            waiting[s.job_id] = s
        # Not ready, placed or not: its trainers start only once it is placed (seconds).
        jobs.append(FleetJob(s.job_id, s.num_gpus, s.global_batch, startup_excluded(s, now), float(total), rate,
                             sample, step, model=s.model, ready=False,
                             length_known=known, gpus_allowed=frozenset(s.devices), **placed))
    starting = frozenset(s.job_id for s in submissions if s.placed)
    return Fleet(tuple(jobs), tuple(gpus.values()), waiting, starting, unstarted)
