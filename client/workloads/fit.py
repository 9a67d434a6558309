"""Fitting the step-time model t(b) = a + c*b by least squares (pure).

The model itself (`StepTimeModel`) is shared with the scheduler, which predicts
a job's exclusive speed from it. Both coefficients are constrained to be >= 0
so a noisy profile never predicts a negative or shrinking step time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpufair.common.errors import InvalidArgument
from gpufair.common.steptime import StepTimeModel

__all__ = ["StepTimeModel", "fit_step_time", "relative_errors"]


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
