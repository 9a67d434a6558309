"""The step-time model t(b) = a + c*b (pure), shared by the profiler that fits
it, the scheduler that predicts exclusive speed from it, and the simulator.

`a` is the per-step fixed cost (kernel launches, optimizer step), `c` the
cost per sample. On n devices a data-parallel step also synchronises
gradients: where a job was measured alone on n devices, the gap between its
step there and the one-device step at the same per-device batch is a
per-step synchronisation cost of that model at that scale (`Scaling`); a
split changes the per-sample part, never the sync. A measured n-device step
*faster* than the one-device one (superlinear, e.g. cache effects) gets no
sync and scales the rank's cost by their ratio instead. Device counts
between measured ones interpolate linearly in n; beyond the largest
measured one the cost stays flat (a ring all-reduce moves 2(n-1)/n of the
gradients, nearly constant past 8); with only one-device data, n devices
scale linearly (no sync), the documented fallback.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping


@dataclass(frozen=True)
class Scale:
    """A model's per-rank cost change at one device count."""

    sync_s: float = 0.0  # added to every step
    rank_factor: float = 1.0  # multiplies the one-device cost (superlinear scales only)


@dataclass(frozen=True)
class Scaling:
    """Measured `Scale`s by device count (n > 1), interpolated as the module says."""

    measured: Mapping[int, Scale] = field(default_factory=dict)

    @classmethod
    def from_steps(cls, one_device_step_s: float, steps: Mapping[int, float]) -> Scaling:
        """From one rank's step time at each measured device count (same
        per-device batch as `one_device_step_s`)."""
        out = {}
        for n, t_n in sorted(steps.items()):
            if n <= 1 or not (math.isfinite(t_n) and t_n > 0):
                continue
            out[n] = (Scale(t_n - one_device_step_s) if t_n >= one_device_step_s
                      else Scale(0.0, t_n / one_device_step_s))
        return cls(out)

    @classmethod
    def from_points(cls, a_s: float, c_s: float,
                    points: Iterable[tuple[int, float, float]]) -> Scaling:
        """From measured (devices, per-device batch, step seconds) points and
        the one-device fit t(b) = a_s + c_s b: per device count, the mean gap
        between its steps and the fit at the same batches."""
        gaps: dict[int, list[float]] = {}
        for devices, batch, step_s in points:
            if devices > 1 and batch > 0 and math.isfinite(step_s) and step_s > 0:
                gaps.setdefault(devices, []).append(step_s - (a_s + c_s * batch))
        if not gaps:
            return cls()
        ref = a_s + c_s  # any batch works for the sync; the rank factor is ~ at batch 1
        return cls.from_steps(ref, {n: ref + sum(g) / len(g) for n, g in gaps.items()})

    def at(self, devices: int) -> Scale:
        """The scale at `devices` devices."""
        if devices <= 1 or not self.measured:
            return Scale()
        known = sorted({1: Scale(), **self.measured}.items())
        counts = [n for n, _ in known]
        if devices >= counts[-1]:
            return known[-1][1]
        hi = bisect.bisect_left(counts, devices)
        (n0, s0), (n1, s1) = known[hi - 1], known[hi]
        if n1 == devices:
            return s1
        w = (devices - n0) / (n1 - n0)
        return Scale(s0.sync_s + w * (s1.sync_s - s0.sync_s),
                     s0.rank_factor + w * (s1.rank_factor - s0.rank_factor))


@dataclass(frozen=True)
class StepTimeModel:
    """t(b) = a_s + c_s * b: seconds per step at per-device batch b, on one
    device; `scaling` says what n devices add."""

    a_s: float
    c_s: float
    scaling: Scaling = field(default_factory=Scaling)

    def step_s(self, batch: float, devices: int = 1) -> float:
        """Predicted seconds per step at per-device batch `batch` on `devices` devices."""
        a, c = self.costs(devices)
        return a + c * batch

    def costs(self, devices: int = 1) -> tuple[float, float]:
        """(fixed seconds per step, seconds per sample) of one rank on `devices` devices."""
        sc = self.scaling.at(devices)
        return self.a_s * sc.rank_factor + sc.sync_s, self.c_s * sc.rank_factor

    def samples_per_s(self, batch: float, devices: int = 1) -> float:
        """Predicted throughput of `devices` devices each at batch `batch`."""
        t = self.step_s(batch, devices)
        return devices * batch / t if t > 0 else math.inf
