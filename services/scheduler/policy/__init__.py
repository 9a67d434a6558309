"""The scheduler's pure policy core: no grpc, no etcd, no clocks.

The service and the simulator build a `ClusterState` and call `decide()`.
"""

from gpufair.scheduler.policy.maxmin import LpSolution, solve_maxmin
from gpufair.scheduler.policy.model import (SharedRates, even_split, exclusive_rate,
                                            fallback_exclusive_rate, shared_rates, slowdown)
from gpufair.scheduler.policy.registry import decide, get_policy, policy_names
from gpufair.scheduler.policy.rounding import moved_fraction, round_split
from gpufair.scheduler.policy.types import (ClusterState, Decision, JobState, PolicyConfig,
                                            RankState)
from gpufair.scheduler.policy.warm import WarmStart

__all__ = [
    "ClusterState", "Decision", "JobState", "LpSolution", "PolicyConfig", "RankState",
    "SharedRates", "decide", "even_split", "exclusive_rate", "fallback_exclusive_rate",
    "get_policy", "moved_fraction", "policy_names", "round_split", "shared_rates",
    "slowdown", "solve_maxmin", "WarmStart",
]
