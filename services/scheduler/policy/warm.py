"""sd-maxmin's LP bases carried from one decision to the next.

The service and the simulator decide every period on a cluster that has
barely moved: jobs progressed, costs were re-measured, a few jobs came or
went. The LPs of consecutive decisions are then nearly the same, and the
previous optimal bases are nearly optimal again. A cold start pays the
full path every time (1,000 jobs 8 GPUs wide on 4,096 GPUs: 5,500 primal
pivots in the throughput LP); a warm one, tens to hundreds.

A basis is kept by *name* (job, rank, GPU), not by position, so it survives
jobs arriving, leaving or being placed elsewhere: a column or row the saved
basis does not know takes the cold-start status. The result may have too
many or too few basic variables, or a singular set of them, so it goes to
HiGHS as an *alien* basis: HiGHS factorises it rank-revealingly and fills
the gaps with slacks. (Repairing the count ourselves, by demoting the
newest basic columns or promoting the newest slacks, left a near-singular
basis whenever jobs had left: 1000 jobs on 2,048 GPUs with 1 % churn, 2 of
10 warm throughput LPs took 5,900 pivots instead of ~150.) The basis
changes the path, never the answer: every solve is still an exact optimum
of its LP.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Sequence

import numpy as np

Key = Hashable


@dataclass(frozen=True)
class KeyedBasis:
    """Basis status codes (HiGHS's, as ints) by column and row name."""

    cols: dict[Key, int]
    rows: dict[Key, int]


@dataclass
class WarmStart:
    """What one decision loop (a service leader, a simulator run) carries from
    decision to decision. Mutable and not thread-safe: one loop, one object."""

    rounds: list[KeyedBasis] = field(default_factory=list)  # the level LP's, after each round
    throughput: KeyedBasis | None = None
    levels: dict[str, float] = field(default_factory=dict)  # job -> its optimal SD level
    pivots: dict[str, int] = field(default_factory=dict)  # the last decision's, per LP


def save(col_keys: Sequence[Key], row_keys: Sequence[Key], cols: np.ndarray,
         rows: np.ndarray) -> KeyedBasis:
    """A solved instance's basis, by name."""
    return KeyedBasis(dict(zip(col_keys, cols.tolist())), dict(zip(row_keys, rows.tolist())))


def restore(saved: KeyedBasis, col_keys: Sequence[Key], row_keys: Sequence[Key],
            fill: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Statuses for a new program: the saved one where the name is known,
    `fill`'s (column, row status codes) elsewhere. Not a basis yet: pass it
    to HiGHS as an alien one (see the module docstring)."""
    col = np.array([saved.cols.get(k, -1) for k in col_keys], dtype=int)
    row = np.array([saved.rows.get(k, -1) for k in row_keys], dtype=int)
    return np.where(col < 0, fill[0], col), np.where(row < 0, fill[1], row)
