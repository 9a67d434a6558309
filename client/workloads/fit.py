"""Step-time model t(b) = a + c*b fitted by least squares (pure).

`a` is the per-step fixed cost (kernel launches, optimizer step, gradient
all-reduce), `c` the cost per sample. The scheduler uses it to predict a job's
exclusive speed at any per-GPU batch. Both are constrained to be >= 0 so a
noisy profile never predicts a negative or shrinking step time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpufair.common.errors import InvalidArgument


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


def _check(points: Sequence[tuple[float, float]]) -> None:
    for b, t in points:
        if not (math.isfinite(b) and math.isfinite(t)) or b <= 0 or t <= 0:
            raise InvalidArgument(f"step-time point (batch={b}, step_s={t}) must have positive finite values")
    if len({b for b, _ in points}) < 2:
        raise InvalidArgument("fitting t(b) = a + c*b needs at least two different batch sizes")


def fit_step_time(points: Sequence[tuple[float, float]]) -> StepTimeModel:
    """Least-squares fit of (batch, step seconds) points, with a >= 0 and c >= 0."""
    _check(points)
    n = len(points)
    # Centred sums: the raw normal equations lose digits when batches are close.
    mb = sum(b for b, _ in points) / n
    mt = sum(t for _, t in points) / n
    sbb = sum((b - mb) ** 2 for b, _ in points)  # > 0: at least two distinct batches
    c = sum((b - mb) * (t - mt) for b, t in points) / sbb
    a = mt - c * mb
    if a < 0:  # best line through the origin
        return StepTimeModel(0.0, sum(b * t for b, t in points) / sum(b * b for b, _ in points))
    if c < 0:  # step time does not grow with batch: best constant
        return StepTimeModel(mt, 0.0)
    return StepTimeModel(a, c)


def relative_errors(model: StepTimeModel, points: Sequence[tuple[float, float]]) -> list[float]:
    """|predicted - measured| / measured for each point."""
    return [abs(model.step_s(b) - t) / t for b, t in points]
