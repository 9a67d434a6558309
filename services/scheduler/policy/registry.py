"""Policies by name, and the one call the service and the simulator make."""

from __future__ import annotations

from gpufair.common.errors import InvalidArgument
from gpufair.scheduler.policy.base import Policy
from gpufair.scheduler.policy.feedback import SdFeedbackPolicy
from gpufair.scheduler.policy.maxmin import SdMaxMinPolicy
from gpufair.scheduler.policy.simple import BalancePolicy, EvenPolicy
from gpufair.scheduler.policy.types import ClusterState, Decision, PolicyConfig, validate_job
from gpufair.scheduler.policy.warm import WarmStart

_POLICIES: tuple[type, ...] = (EvenPolicy, BalancePolicy, SdFeedbackPolicy, SdMaxMinPolicy)


def policy_names() -> tuple[str, ...]:
    """Every registered policy name, baseline first."""
    return tuple(p.name for p in _POLICIES)


def get_policy(name: str) -> Policy:
    """A fresh policy instance for `name`; InvalidArgument if unknown."""
    for cls in _POLICIES:
        if cls.name == name:
            return cls()
    raise InvalidArgument(f"unknown policy {name!r}; choose one of {', '.join(policy_names())}")


def decide(cluster: ClusterState, policy: str, config: PolicyConfig | None = None,
           warm: WarmStart | None = None) -> dict[str, Decision]:
    """Validate the snapshot and run the named policy: one Decision per job.
    A loop that decides again and again passes the same `warm` every time."""
    seen: set[str] = set()
    for job in cluster.jobs:
        if job.job in seen:
            raise InvalidArgument(f"job {job.job!r} appears twice in the snapshot")
        seen.add(job.job)
        validate_job(job)
    cfg = config or PolicyConfig()
    if not 0 <= cfg.min_change < 1:
        raise InvalidArgument(f"min_change must be in [0, 1), got {cfg.min_change}")
    if cfg.realise_evals < 0 or cfg.realise_work < 0:
        raise InvalidArgument(f"realise_evals and realise_work must be >= 0, got "
                              f"{cfg.realise_evals} and {cfg.realise_work}")
    return get_policy(policy).decide(cluster, cfg, warm)
