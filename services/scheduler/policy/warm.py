"""sd-maxmin's LP bases carried from one decision to the next.

The service and the simulator decide every period on a cluster that has
barely moved: jobs progressed, costs were re-measured, a few jobs came or
went. The LPs of consecutive decisions are then nearly the same, and the
previous optimal bases are nearly optimal again. A cold start pays the
full path every time (1,000 jobs 8 GPUs wide on 4,096 GPUs: 5,500 primal
pivots in the throughput LP); a warm one, tens to hundreds.

A basis is carried by *name* (job, rank, GPU), not by position, so it
survives jobs arriving, leaving or being placed elsewhere: a column or row
the saved basis does not know takes the cold-start status. Each program
describes its columns and rows as arrays over its jobs, ranks and GPUs
(`Keys`), so mapping one program onto the next (`carry`) is two name
lookups (jobs, GPUs) and array arithmetic (a tuple key per column and
row, saved and looked up in dicts, cost 10-15 ms a warm decision at 1,000
jobs on 2,048 GPUs). The result may have too
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
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class Keys:
    """What each column and row of a split LP stands for: per listed job,
    per rank (job order, then rank order) and per GPU, the column or row
    it owns (-1: none). `lp_matrix.keys` fills it."""

    jobs: Sequence[str]
    gpus: Sequence[str]  # by dense GPU index
    rank_start: np.ndarray  # per job, its first rank; one more entry at the end
    rank_gpu: np.ndarray  # per rank, its dense GPU index
    rank_cols: np.ndarray  # per rank, its share column (-1: the job's split is fixed)
    rank_rows: np.ndarray  # per rank, its cap row (-1: fixed split, or no cap binds)
    job_cols: np.ndarray  # (jobs, 2): step-rate column; its component's level column (-1: not
    #                       the component's first job, which stands for it)
    job_rows: np.ndarray  # (jobs, 2): batch row (-1: fixed split); demand row
    gpu_rows: np.ndarray  # per GPU, its row
    shape: tuple[int, int]  # rows, columns


@dataclass(frozen=True)
class SavedBasis:
    """A solved instance's basis: HiGHS status codes (ints) by position in
    the program `keys` describes (the leftover LP's: a prefix of them)."""

    keys: Keys
    cols: np.ndarray
    rows: np.ndarray


@dataclass
class WarmStart:
    """What one decision loop (a service leader, a simulator run) carries from
    decision to decision. Mutable and not thread-safe: one loop, one object."""

    rounds: list[SavedBasis] = field(default_factory=list)  # the level LP's, after each round
    throughput: SavedBasis | None = None
    levels: dict[str, float] = field(default_factory=dict)  # job -> its optimal SD level
    pivots: dict[str, int] = field(default_factory=dict)  # the last decision's, per LP


def _lookup(old: Sequence[str], new: Sequence[str]) -> np.ndarray:
    """Per name in `new`, its position in `old` (-1: absent)."""
    at = {name: i for i, name in enumerate(old)}
    return np.fromiter((at.get(name, -1) for name in new), dtype=int, count=len(new))


def _copy(out: np.ndarray, dst: np.ndarray, src: np.ndarray) -> None:
    """out[dst] = src where the new program has the entry (dst >= 0)."""
    has = dst >= 0
    out[dst[has]] = src[has]


def carry(old: Keys, new: Keys) -> tuple[np.ndarray, np.ndarray]:
    """Per column and per row of `new`, the same one in `old` (-1: none).
    The same means: the job's or GPU's own by name, a rank's by its job's
    name, its index in the job and its GPU's name."""
    cols, rows = np.full(new.shape[1], -1), np.full(new.shape[0], -1)
    if not len(old.rank_gpu) or not len(new.rank_gpu):
        return cols, rows  # a program always has ranks; this guards the indexing below
    job, gpu = _lookup(old.jobs, new.jobs), _lookup(old.gpus, new.gpus)
    kept = np.nonzero(job >= 0)[0]
    for k in range(2):
        _copy(cols, new.job_cols[kept, k], old.job_cols[job[kept], k])
        _copy(rows, new.job_rows[kept, k], old.job_rows[job[kept], k])
    seen = np.nonzero(gpu >= 0)[0]
    _copy(rows, new.gpu_rows[seen], old.gpu_rows[gpu[seen]])
    sizes = np.diff(new.rank_start)
    owner = np.repeat(np.arange(len(sizes)), sizes)
    index = np.arange(len(owner)) - new.rank_start[owner]
    was = job[owner]
    ok = (was >= 0) & (index < np.diff(old.rank_start)[was])  # was -1: masked out
    at = np.where(ok, old.rank_start[was] + index, 0)
    ok &= old.rank_gpu[at] == gpu[new.rank_gpu]  # never true where the GPU is new (-1)
    _copy(cols, np.where(ok, new.rank_cols, -1), old.rank_cols[at])
    _copy(rows, np.where(ok, new.rank_rows, -1), old.rank_rows[at])
    return cols, rows


def restore(saved: SavedBasis, col_src: np.ndarray, row_src: np.ndarray,
            fill: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Statuses for a new program from `carry`'s maps onto `saved.keys`: the
    saved one where the column or row is known (and inside the saved
    arrays), `fill`'s (column, row status codes) elsewhere. Not a basis yet:
    pass it to HiGHS as an alien one (see the module docstring)."""
    def pick(src: np.ndarray, codes: np.ndarray, cold: np.ndarray) -> np.ndarray:
        known = (src >= 0) & (src < len(codes))
        if not known.any():
            return cold.copy()
        return np.where(known, codes[np.where(known, src, 0)], cold)
    return pick(col_src, saved.cols, fill[0]), pick(row_src, saved.rows, fill[1])
