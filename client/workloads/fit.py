"""Fitting the step-time model t(b) = a + c*b by least squares on relative
error (pure).

The model itself (`StepTimeModel`) is shared with the scheduler, which predicts
a job's exclusive speed from it, and a paced rank's speed at the few samples a
split leaves it. A profile's batches span step times tenfold and more, so the
fit weighs each point's error relative to its step time: plain least squares
fits the large batches and can miss the smallest by most of its time (a CPU
profile measured under load: 69 % at batch 4, against 4-25 % at every batch
weighted). Both coefficients are constrained to be >= 0 so a noisy profile
never predicts a negative or shrinking step time.
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
    """The (a, c), a >= 0 and c >= 0, that minimise the squared relative errors
    of (batch, step seconds) points (module docstring)."""
    _check(points)
    w = [1.0 / (t * t) for _, t in points]  # (pred - t) / t, squared
    sw = sum(w)
    # Weighted centred sums: the raw normal equations lose digits when batches are close.
    mb = sum(wi * b for wi, (b, _) in zip(w, points)) / sw
    mt = sum(wi * t for wi, (_, t) in zip(w, points)) / sw
    sbb = sum(wi * (b - mb) ** 2 for wi, (b, _) in zip(w, points))  # > 0: two distinct batches
    c = sum(wi * (b - mb) * (t - mt) for wi, (b, t) in zip(w, points)) / sbb
    a = mt - c * mb
    if a < 0:  # best line through the origin
        return StepTimeModel(0.0, sum(wi * b * t for wi, (b, t) in zip(w, points))
                             / sum(wi * b * b for wi, (b, _) in zip(w, points)))
    if c < 0:  # step time does not grow with batch: best constant
        return StepTimeModel(mt, 0.0)
    return StepTimeModel(a, c)


def relative_errors(model: StepTimeModel, points: Sequence[tuple[float, float]]) -> list[float]:
    """|predicted - measured| / measured for each point."""
    return [abs(model.step_s(b) - t) / t for b, t in points]
