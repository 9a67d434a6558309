"""Profile records: what the profiler measured and the fitted step-time model.

`gpufair profile --store` sends one to the scheduler's PutProfile (`to_pb`);
the scheduler validates and keeps it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.client.workloads.fit import StepTimeModel, fit_step_time
from gpufair.common.errors import InvalidArgument


@dataclass(frozen=True)
class Measurement:
    """One (devices, per-device batch) point: timed steps on synthetic data."""

    model: str
    device_type: str
    devices: int
    batch: int  # per device
    samples_per_s: float  # all devices together
    step_s: float  # median
    step_s_p10: float
    step_s_p90: float
    peak_mem_bytes: int  # per device (CUDA allocator peak, or process RSS high-water on CPU)
    scaling_eff: float | None = None  # throughput / (devices x one-device throughput)
    gpu_util_pct: float | None = None  # NVML, mean over the timed steps

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (the `gpufair profile --json` row)."""
        return asdict(self)


def with_scaling(points: Sequence[Measurement]) -> list[Measurement]:
    """Fill in scaling efficiency against the one-device point at the same batch."""
    single = {m.batch: m.samples_per_s for m in points if m.devices == 1}
    out = []
    for m in points:
        base = single.get(m.batch)
        eff = m.samples_per_s / (m.devices * base) if base else None
        out.append(replace(m, scaling_eff=eff))
    return out


@dataclass(frozen=True)
class Profile:
    """A model's exclusive-speed profile on one device type."""

    model: str
    device_type: str
    image_size: int
    measurements: tuple[Measurement, ...]
    fit: StepTimeModel | None  # from the fewest-device points; None with one batch size
    fit_devices: int
    created_unix: float
    torch_version: str = ""

    @classmethod
    def build(cls, measurements: Sequence[Measurement], *, image_size: int,
              created_unix: float, torch_version: str = "") -> Profile:
        """Assemble a profile, computing scaling efficiency and the step-time fit."""
        if not measurements:
            raise InvalidArgument("a profile needs at least one measurement")
        kinds = {(m.model, m.device_type) for m in measurements}
        if len(kinds) != 1:
            raise InvalidArgument(f"a profile covers one model on one device type, got {sorted(kinds)}")
        points = with_scaling(measurements)
        fewest = min(m.devices for m in points)
        pairs = [(float(m.batch), m.step_s) for m in points if m.devices == fewest]
        fit = fit_step_time(pairs) if len({b for b, _ in pairs}) >= 2 else None
        model, device_type = kinds.pop()
        return cls(model, device_type, image_size, tuple(points), fit, fewest,
                   created_unix, torch_version)

    def to_pb(self) -> pb.Profile:
        """The wire form the scheduler's PutProfile stores (the scheduler owns how it is kept)."""
        out = pb.Profile(model=self.model, device_type=self.device_type, image_size=self.image_size,
                         fit_devices=self.fit_devices, created_unix=self.created_unix, torch_version=self.torch_version,
                         measurements=[pb.ProfileMeasurement(**m.to_dict()) for m in self.measurements])
        if self.fit is not None:
            out.fit.CopyFrom(pb.StepTimeFit(a_s=self.fit.a_s, c_s=self.fit.c_s))
        return out
