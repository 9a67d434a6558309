"""Turn real-valued batch shares into integer splits that keep every rule:
sum exactly B, at least 1 per rank, at most the rank's cap."""

from __future__ import annotations

import math
from typing import Sequence

from gpufair.common.errors import InvalidArgument


def _bounded_targets(weights: Sequence[float], total: int, lo: list[float],
                     hi: list[float]) -> list[float]:
    """Proportional real targets, clamped to [lo, hi] with the excess re-spread."""
    n = len(weights)
    fixed: dict[int, float] = {}
    for _ in range(n + 1):
        free = [i for i in range(n) if i not in fixed]
        left = total - sum(fixed.values())
        wsum = sum(max(weights[i], 0.0) for i in free)
        target = {i: (left * max(weights[i], 0.0) / wsum if wsum > 0 else left / len(free))
                  for i in free}
        clamped = {i: min(max(v, lo[i]), hi[i]) for i, v in target.items()
                   if v < lo[i] or v > hi[i]}
        if not clamped:
            return [fixed.get(i, target.get(i, 0.0)) for i in range(n)]
        # Fix the worst violators first so the re-spread stays feasible.
        worst = max(clamped, key=lambda i: abs(clamped[i] - target[i]))
        fixed[worst] = clamped[worst]
        if len(fixed) == n:
            return [fixed[i] for i in range(n)]
    return [fixed.get(i, 0.0) for i in range(n)]


def round_split(weights: Sequence[float], total: int,
                caps: Sequence[int | None] | None = None) -> tuple[int, ...]:
    """Integer batches proportional to `weights`, summing to `total`, each in
    [1, cap] (largest-remainder rounding after clamping)."""
    n = len(weights)
    hi = [float(total if c is None else min(c, total)) for c in (caps or [None] * n)]
    if n == 0 or total < n or sum(hi) < total:
        raise InvalidArgument(f"cannot split {total} samples over {n} ranks with caps {list(caps or [])}")
    lo = [1.0] * n
    target = _bounded_targets(weights, total, lo, hi)
    out = [min(max(math.floor(t + 1e-9), 1), int(hi[i])) for i, t in enumerate(target)]
    frac = sorted(range(n), key=lambda i: (-(target[i] - out[i]), i))
    diff = total - sum(out)
    while diff != 0:
        step = 1 if diff > 0 else -1
        order = frac if step > 0 else list(reversed(frac))
        moved = False
        for i in order:
            if (step > 0 and out[i] < hi[i]) or (step < 0 and out[i] > 1):
                out[i] += step
                diff -= step
                moved = True
                if diff == 0:
                    break
        if not moved:  # cannot happen after the feasibility check above
            raise InvalidArgument(f"cannot round split of {total} within caps")
    return tuple(out)


def moved_fraction(old: Sequence[int], new: Sequence[int]) -> float:
    """Fraction of the global batch that changes rank: sum|new-old| / 2B."""
    total = sum(old)
    return sum(abs(a - b) for a, b in zip(old, new)) / (2 * total) if total else 0.0
