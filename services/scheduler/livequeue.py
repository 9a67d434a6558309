"""The live queue (pure): every job waiting for GPU time after a round, in
the round's priority order, with why and until when. Submissions wait for
GPUs (the planner says why); registered jobs wait on their own GPUs while
the planner holds them (their GPUs run more urgent jobs). And the shares the
trainers get (`live_shares`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

from gpufair.scheduler.fleetview import Fleet
from gpufair.scheduler.jobs import JobSpec, is_held
from gpufair.scheduler.policy.fleet import FleetJob, RoundPlan


@dataclass(frozen=True)
class LiveQueueEntry:
    """One waiting job (`gpufair queue`)."""

    job: str
    position: int
    predicted_start_s: float
    waited_s: float
    reason: str
    submitted: bool

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> LiveQueueEntry:
        return cls(**d)

    def describe(self) -> str:
        """One line for logs and split reasons."""
        start = (f"predicted start in ~{self.predicted_start_s:.0f} s"
                 if self.predicted_start_s < float("inf") else "no start predicted")
        return f"position {self.position}, {start} ({self.reason})"


def _runners(shares: Mapping[str, tuple[float, ...]], jobs: Mapping[str, FleetJob]) -> dict[str, list[str]]:
    """device -> the jobs given time on it."""
    out: dict[str, list[str]] = {}
    for name, per_rank in shares.items():
        for device, share in zip(jobs[name].gpus, per_rank):
            if share > 0:
                out.setdefault(device, []).append(name)
    return out


def live_shares(plan: RoundPlan, fleet: Fleet) -> dict[str, tuple[float, ...]]:
    """The round's shares as the trainers get them: a job held only for jobs still
    starting (placed, trainers not registered: torchrun and imports take seconds;
    or registered over `STARTUP_GRACE_S` ago with no step yet) keeps its GPUs'
    whole time until they step, instead of idling them. A job that lent time
    runs unpaced (`RoundPlan.unpaced`). Placed jobs get theirs when they
    register."""
    jobs = {j.job: j for j in fleet.jobs}
    for name, devices in plan.admitted.items():
        jobs[name] = replace(jobs[name], gpus=devices)
    starting = fleet.starting | set(plan.admitted)
    not_stepping = starting | fleet.unstarted
    runners = _runners(plan.shares, jobs)
    out = {}
    for name, shares in plan.shares.items():
        if name in starting:
            continue
        ahead = {r for d in jobs[name].gpus for r in runners.get(d, ()) if r != name}
        whole = name in plan.unpaced or (is_held(shares) and ahead and ahead <= not_stepping)
        out[name] = (1.0,) * len(shares) if whole else shares
    return out


def queue_entries(plan: RoundPlan, fleet: Fleet, now: float,
                  shares: Mapping[str, tuple[float, ...]] | None = None) -> dict[str, LiveQueueEntry]:
    """job -> entry, most urgent first (module docstring); `shares`: those given
    out (default the plan's)."""
    shares = plan.shares if shares is None else shares
    jobs = {j.job: j for j in fleet.jobs}
    planned = {q.job: q for q in plan.queue}
    runners = _runners(shares, jobs)
    waiting = []
    for name, job in jobs.items():
        if name in planned:
            q = planned[name]
            waiting.append((name, q.predicted_start_s, q.reason, True))
        elif not job.waiting and is_held(shares.get(name, ())):
            ahead = sorted({r for d in job.gpus for r in runners.get(d, ()) if r != name})
            start = max((jobs[r].remaining_s() for r in ahead), default=0.0)
            reason = (f"its GPUs run more urgent jobs: {', '.join(ahead[:3])}"
                      + (", ..." if len(ahead) > 3 else "")) if ahead else "waiting for its turn"
            waiting.append((name, start, reason, False))
    waiting.sort(key=lambda w: plan.priority.get(w[0], len(jobs)))
    return {name: LiveQueueEntry(name, pos, start, max(now - jobs[name].arrival_s, 0.0), reason, submitted)
            for pos, (name, start, reason, submitted) in enumerate(waiting, 1)}


def held_at_registration(plan: RoundPlan | None, spec: JobSpec) -> bool:
    """Under pacing, a job that registers on its own GPUs waits for the next round
    when the last round gave any of them to another job (never before a round)."""
    outlook = plan.outlook if plan is not None else None
    if outlook is None:
        return False
    busy = {name for name, runner in zip(outlook.names, outlook.runner_name) if runner}
    return any(r.device_id in busy for r in spec.ranks)
