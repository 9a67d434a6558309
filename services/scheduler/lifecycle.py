"""A job's life as the scheduler records it in etcd (`jobs/<job>/life`), pure.

    queued --first rank joins--> running --session.close()--> finished | failed
       \\__________________________\\--all ranks gone for LOST_S--> failed (finished if its work was done)
       \\__________________________\\--`gpufair job rm`--> removed

`queued` means registered and not training yet; a later admission step may
hold a job there with a reason (`reason` says why in words), which needs no
other field. An ended life keeps its final figures (samples, completion
time, slow-down) until the retention rule purges it. Every change bumps
`version`, so writers compare-and-swap and two replicas never both end a job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from enum import Enum

from gpufair.common.state import Json


class Phase(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    REMOVED = "removed"


ACTIVE = frozenset({Phase.QUEUED, Phase.RUNNING})


@dataclass(frozen=True)
class JobLife:
    """One life of a job: registration to end (a job registered again after it ended gets a new one)."""

    version: int
    phase: Phase
    registered_unix_s: float
    started_unix_s: float = 0.0
    ended_unix_s: float = 0.0
    reason: str = ""
    samples_done: int = 0
    exclusive_rate: float = 0.0
    slowdown: float = 0.0
    first_split_version: int = 0

    @property
    def active(self) -> bool:
        return self.phase in ACTIVE

    @property
    def jct_s(self) -> float:
        """Completion time: first join to end (0 while active or if it never started)."""
        if self.active or not self.started_unix_s:
            return 0.0
        return max(self.ended_unix_s - self.started_unix_s, 0.0)

    def to_json(self) -> Json:
        return {**asdict(self), "phase": self.phase.value}

    @classmethod
    def from_json(cls, d: Json) -> JobLife:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**{**known, "phase": Phase(d["phase"])})


def new_life(now: float, first_split_version: int, version: int = 1) -> JobLife:
    return JobLife(version, Phase.QUEUED, now, reason="registered; waiting for its first rank to join",
                   first_split_version=first_split_version)


def started(life: JobLife, now: float) -> JobLife | None:
    """The life once a rank joined; None if nothing changes (already running or ended)."""
    if life.phase is not Phase.QUEUED:
        return None
    return replace(life, version=life.version + 1, phase=Phase.RUNNING, started_unix_s=now, reason="training")


def final_slowdown(jct_s: float, samples: int, exclusive_rate: float) -> float:
    """Completion time over the time the same work takes alone; 0 if unknown.

    By definition never below 1: a smaller figure means the exclusive speed was
    underestimated, and what is known is then only that the job ran about alone."""
    if jct_s <= 0 or samples <= 0 or exclusive_rate <= 0:
        return 0.0
    return max(jct_s / (samples / exclusive_rate), 1.0)


def ended(life: JobLife, phase: Phase, now: float, reason: str, samples: int, exclusive_rate: float) -> JobLife | None:
    """The life ended as `phase` with its final figures; None if it had already ended."""
    if not life.active:
        return None
    samples = max(samples, life.samples_done)
    out = replace(life, version=life.version + 1, phase=phase, ended_unix_s=now, reason=reason[:500], samples_done=samples,
                  exclusive_rate=exclusive_rate)
    return replace(out, slowdown=final_slowdown(out.jct_s, samples, exclusive_rate))


@dataclass(frozen=True)
class Retention:
    """How long ended records stay listed: at most `keep_s` seconds after they
    ended, and only the newest `keep_max` of them."""

    keep_s: float = 7 * 24 * 3600.0
    keep_max: int = 1000


def to_purge(lives: Mapping[str, JobLife], now: float, rule: Retention) -> list[str]:
    """Ids of ended jobs the retention rule no longer keeps, oldest first."""
    done = sorted((life.ended_unix_s, job) for job, life in lives.items() if not life.active)
    expired = [job for t, job in done if now - t > rule.keep_s]
    kept = [job for t, job in done if now - t <= rule.keep_s]
    return expired + kept[:max(len(kept) - rule.keep_max, 0)]


def lost(running: Iterable[tuple[str, int]], empty_since: dict[str, float], now: float, grace_s: float) -> list[str]:
    """Running jobs with no live rank for `grace_s` seconds; updates `empty_since`
    (job -> when its last rank went) from (job, live ranks) pairs."""
    seen, out = set(), []
    for job, live in running:
        seen.add(job)
        if live > 0:
            empty_since.pop(job, None)
            continue
        since = empty_since.setdefault(job, now)
        if now - since >= grace_s:
            out.append(job)
    for job in set(empty_since) - seen:
        del empty_since[job]
    return out
