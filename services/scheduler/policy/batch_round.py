"""`round_split` for many jobs at once.

The common case (every proportional target already inside [1, cap], the
largest remainders fill the gap in one pass) is done with array operations
over all ranks together; every other job goes through `round_split` itself.
Both paths give the same integers: the fast path repeats round_split's
float operations in the same order.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from gpufair.scheduler.policy.rounding import round_split


def round_splits(weights: Sequence[Sequence[float]], totals: Sequence[int],
                 caps: Sequence[Sequence[int | None]]) -> list[tuple[int, ...]]:
    """`round_split(weights[i], totals[i], caps[i])` for every i."""
    if not weights:
        return []
    sizes = np.array([len(w) for w in weights])
    owner = np.repeat(np.arange(len(weights)), sizes)
    start = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    total = np.array(totals, dtype=float)
    w = np.maximum(np.concatenate([np.asarray(x, dtype=float) for x in weights]), 0.0)
    hi = np.array([t if c is None else min(c, t)
                   for cs, t in zip(caps, totals) for c in cs], dtype=float)
    wsum = np.bincount(owner, weights=w, minlength=len(weights))  # left-to-right, like sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        target = total[owner] * w / wsum[owner]
    out = np.floor(target + 1e-9)
    diff = total - np.bincount(owner, weights=out, minlength=len(weights))
    # Largest remainder first, ties to the lower rank: one pass adds 1 to the
    # first `diff` ranks still under their cap. Sorting by job first keeps
    # every job's ranks at the same positions, so `owner` and `start` still apply.
    order = np.lexsort((np.arange(len(w)), -(target - out), owner))
    free = out[order] < hi[order]
    run = np.cumsum(free)
    seen = run - (run[start] - free[start])[owner]  # free ranks so far within the job
    add = np.zeros(len(w))
    add[order] = free & (seen <= diff[owner])
    inside = np.bincount(owner, weights=(target < 1.0) | (target > hi),
                         minlength=len(weights)) == 0
    ok = (wsum > 0) & inside & (diff >= 0) \
        & (np.bincount(owner, weights=free, minlength=len(weights)) >= diff)
    result = np.where(np.isfinite(out), out + add, 0).astype(int)
    return [tuple(result[s:s + n].tolist()) if ok[i]
            else round_split(weights[i], totals[i], caps[i])
            for i, (s, n) in enumerate(zip(start.tolist(), sizes.tolist()))]
