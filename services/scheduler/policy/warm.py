"""sd-maxmin's LP bases carried from one decision to the next.

The service and the simulator decide every period on a cluster that has
barely moved: jobs progressed, costs were re-measured, a few jobs came or
went. The LPs of consecutive decisions are then nearly the same, and the
previous optimal bases are nearly optimal again. A cold start pays the
full path every time (1,000 jobs 8 GPUs wide on 4,096 GPUs: 5,500 primal
pivots in the throughput LP); a warm one, tens to hundreds.

A basis is kept by *name* (job, rank, GPU), not by position, so it survives
jobs arriving, leaving or being placed elsewhere: a column or row the saved
basis does not know takes the cold-start status, and the count of basic
variables is then repaired (it must equal the number of rows). A repaired
basis may be singular or infeasible; HiGHS swaps in slacks and pivots on
from there. The basis changes the path, never the answer: every solve is
still an exact optimum of its LP.
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

    level: KeyedBasis | None = None
    throughput: KeyedBasis | None = None
    levels: dict[str, float] = field(default_factory=dict)  # job -> its optimal SD level
    pivots: dict[str, int] = field(default_factory=dict)  # the last decision's, per LP


def save(col_keys: Sequence[Key], row_keys: Sequence[Key], cols: np.ndarray,
         rows: np.ndarray) -> KeyedBasis:
    """A solved instance's basis, by name."""
    return KeyedBasis(dict(zip(col_keys, cols.tolist())), dict(zip(row_keys, rows.tolist())))


def restore(saved: KeyedBasis, col_keys: Sequence[Key], row_keys: Sequence[Key],
            cold: tuple[np.ndarray, np.ndarray], basic: int, lower: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """Statuses for a new program: the saved one where the name is known, the
    cold start's elsewhere; then exactly one basic variable per row. Too many:
    the newest basic columns go to their lower bound; too few: the newest
    non-basic rows' slacks become basic."""
    col_new = np.array([saved.cols.get(k, -1) for k in col_keys], dtype=int)
    row_new = np.array([saved.rows.get(k, -1) for k in row_keys], dtype=int)
    col = np.where(col_new < 0, cold[0], col_new)
    row = np.where(row_new < 0, cold[1], row_new)
    excess = int((col == basic).sum() + (row == basic).sum()) - len(row)
    if excess > 0:  # at most the basic columns' count: basic rows never exceed the rows
        cand = np.nonzero(col == basic)[0]
        order = np.argsort(col_new[cand] >= 0, kind="stable")  # unknown names first
        col[cand[order[:excess]]] = lower
    elif excess < 0:
        cand = np.nonzero(row != basic)[0]
        order = np.argsort(row_new[cand] >= 0, kind="stable")
        row[cand[order[:-excess]]] = basic
    return col, row
