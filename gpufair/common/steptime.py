"""The step-time model t(b) = a + c*b (pure), shared by the profiler that fits
it and the scheduler that predicts exclusive speed from it.

`a` is the per-step fixed cost (kernel launches, optimizer step, gradient
all-reduce), `c` the cost per sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class StepTimeModel:
    """t(b) = a_s + c_s * b: seconds per step at per-device batch b."""

    a_s: float
    c_s: float

    def step_s(self, batch: float) -> float:
        """Predicted seconds per step at per-device batch `batch`."""
        return self.a_s + self.c_s * batch

    def samples_per_s(self, batch: float, devices: int = 1) -> float:
        """Predicted throughput of `devices` devices each at batch `batch` (ideal scaling)."""
        t = self.step_s(batch)
        return devices * batch / t if t > 0 else math.inf
