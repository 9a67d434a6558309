"""Where the scheduler reads its inputs: the metrics service and the policy in etcd
(profiles: `gpufair.scheduler.profiles`)."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace

import grpc

from gpufair.api.metrics.v1 import metrics_service_pb2 as mpb
from gpufair.api.metrics.v1 import metrics_service_pb2_grpc as mpb_grpc
from gpufair.common import limits
from gpufair.common.errors import InvalidArgument, Unavailable
from gpufair.common.keys import Keys
from gpufair.common.state import StateStore
from gpufair.scheduler.policy import policy_names
from gpufair.scheduler.policy.fleet import PRESETS, Levers
from gpufair.scheduler.snapshot import JobMetrics, RankMetrics

logger = logging.getLogger(__name__)


class MetricsSource:
    """Reads per-job statistics from the metrics service."""

    def __init__(self, channel: grpc.aio.Channel, timeout_s: float = 2.0, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self._stub = mpb_grpc.MetricsServiceStub(channel)
        self._timeout = timeout_s
        self._metadata = metadata

    async def fetch(self) -> dict[str, JobMetrics]:
        try:
            res = await self._stub.ListJobStats(mpb.ListJobStatsRequest(), timeout=self._timeout, metadata=self._metadata)
        except grpc.aio.AioRpcError as exc:
            raise Unavailable(f"metrics service: {exc.code().name}: {exc.details()}") from exc
        return {
            j.job_id: JobMetrics(
                samples_per_s=j.samples_per_s_smoothed or j.samples_per_s,
                samples_done=j.samples_done,
                first_unix_s=j.first_report_unix_s,
                last_unix_s=j.last_report_unix_s,
                ranks={r.rank: RankMetrics(r.compute_s_per_sample, r.compute_s_fixed, r.last_step) for r in j.ranks},
            )
            for j in res.jobs
        }


@dataclass(frozen=True)
class PolicySettings:
    """The split policy and its knobs, and the other levers (`policy.fleet.Levers`)."""

    name: str = "sd-maxmin"
    period_s: float = 5.0
    min_change: float = 0.05
    queue: str = "fifo"
    placement: str = "least-loaded"
    shares: str = "time-slicing"

    def levers(self) -> Levers:
        """The round planner's levers."""
        return Levers(self.queue, self.placement, self.shares, self.name)

    @classmethod
    def preset(cls, name: str, base: "PolicySettings") -> "PolicySettings":
        """`base` with the levers (and split policy) of preset `name`."""
        if name not in PRESETS:
            raise InvalidArgument(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        lv = PRESETS[name]
        return replace(base, name=lv.split, queue=lv.queue, placement=lv.placement, shares=lv.shares)

    def validated(self) -> "PolicySettings":
        self.levers().validated()
        if self.name not in policy_names():
            raise InvalidArgument(f"unknown policy {self.name!r}; choose one of {', '.join(policy_names())}")
        lo, hi = limits.PERIOD_S
        if not lo <= self.period_s <= hi:
            raise InvalidArgument(f"period_s={self.period_s} must be in [{lo:g}, {hi:g}] seconds")
        lo, hi = limits.MIN_CHANGE
        if not lo <= self.min_change <= hi:
            raise InvalidArgument(f"min_change={self.min_change} must be in [{lo:g}, {hi:g}]")
        return self


class PolicyStore:
    """The active policy in etcd (`scheduler/policy`), with env-given defaults."""

    def __init__(self, state: StateStore, keys: Keys, default: PolicySettings) -> None:
        self._state, self._keys, self.default = state, keys, default

    async def get(self) -> PolicySettings:
        stored = await self._state.get(self._keys.policy())
        if stored is None:
            return self.default
        v, d = stored.value, self.default
        return PolicySettings(v.get("name", d.name), float(v.get("period_s", d.period_s)),
                              float(v.get("min_change", d.min_change)), v.get("queue", d.queue),
                              v.get("placement", d.placement), v.get("shares", d.shares))

    async def set(self, name: str, period_s: float, min_change: float, queue: str = "",
                  placement: str = "", shares: str = "", preset: str = "") -> PolicySettings:
        """Change what is given (empty or 0: keep); a preset first, the rest over it."""
        current = await self.get()
        if preset:
            current = PolicySettings.preset(preset, current)
        new = PolicySettings(name or current.name, period_s or current.period_s, min_change or current.min_change,
                             queue or current.queue, placement or current.placement,
                             shares or current.shares).validated()
        await self._state.put(self._keys.policy(), asdict(new))
        return new
