"""What every policy shares: the Policy protocol and how a proposed split
becomes a Decision (threshold, pinning, explanation)."""

from __future__ import annotations

from typing import Mapping, Protocol

from gpufair.scheduler.policy.rounding import moved_fraction
from gpufair.scheduler.policy.types import ClusterState, Decision, JobState, PolicyConfig
from gpufair.scheduler.policy.warm import WarmStart


class Policy(Protocol):
    """A split policy: a pure function of a cluster snapshot. `warm` (only
    sd-maxmin uses it) may make a decision faster, never different in value."""

    name: str

    def decide(self, cluster: ClusterState, config: PolicyConfig,
               warm: WarmStart | None = None) -> dict[str, Decision]:
        """One Decision per job in the snapshot."""
        ...


def _describe_move(job: JobState, old: tuple[int, ...], new: tuple[int, ...]) -> str:
    deltas = [(n - o, r.gpu) for r, o, n in zip(job.ranks, old, new) if n != o]
    gave = ", ".join(f"{-d} off {g}" for d, g in deltas if d < 0)
    took = ", ".join(f"{d} onto {g}" for d, g in deltas if d > 0)
    return f"{gave}; {took}" if gave else "no samples move"


def finalize(job: JobState, policy: str, proposed: tuple[int, ...], config: PolicyConfig,
             reason: str, numbers: Mapping[str, float] | None = None) -> Decision:
    """Apply the rules every policy shares and explain the outcome in words."""
    nums = dict(numbers or {})
    if job.pinned is not None:
        return Decision(job.job, policy, job.pinned, job.pinned != job.split,
                        f"split pinned by an operator to {list(job.pinned)}", nums)
    if len(job.ranks) == 1:
        return Decision(job.job, policy, job.split, False,
                        "single-GPU job: nothing to re-split", nums)
    old = job.split
    moved = moved_fraction(old, proposed)
    nums["moved_fraction"] = moved
    nums["min_change"] = config.min_change
    if moved == 0:
        return Decision(job.job, policy, old, False, f"{reason}; split already there", nums)
    if moved < config.min_change:
        return Decision(job.job, policy, old, False,
                        f"{reason}; would move {moved:.1%} of the batch, below the "
                        f"{config.min_change:.1%} threshold, so the split stays "
                        f"{list(old)}", nums)
    return Decision(job.job, policy, proposed, True,
                    f"{reason}; {list(old)} -> {list(proposed)} "
                    f"({_describe_move(job, old, proposed)}, {moved:.1%} of the batch)", nums)
