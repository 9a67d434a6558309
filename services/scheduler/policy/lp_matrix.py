"""The split LP's matrix, built from a cluster snapshot with numpy (no solver).

Variables: per rank k of a splittable job j a share y_jk >= 0 (samples/s
above the 1-sample minimum, in units of B_j steps/s: the rank's sample rate
is x_jk = s_j + B_j y_jk, which keeps ">= 1 sample" a bound, not a row, and
the matrix well scaled); per job its step rate s_j (steps/s); per
component c one level lam_c.

    GPU g:    sum over ranks on g of (a_jk + c_jk) s_j + c_jk B_j y_jk <= 1
              (a fixed-split job: (a_jk + c_jk b_jk) s_j)
    cap:      B_j y_jk - (cap_jk - 1) s_j <= 0        (only where a cap binds)
    batch:    sum_k y_jk - (1 - n_j / B_j) s_j = 0
    demand:   delta_j lam_c - s_j <= 0   (one row per job; delta_j = 0: off)
    floors:   s_j >= floor_j              (column bounds)

Maximising sum_c lam_c maximises every lam_c on its own, because components
share no constraint: one LP serves every component at once. Each row has
one or two non-zeros per rank, so the matrix stays O(ranks). `lp` solves it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from gpufair.scheduler.policy.components import fixed_split
from gpufair.scheduler.policy.types import ClusterState
from gpufair.scheduler.policy.warm import Keys


@dataclass(frozen=True)
class Ranks:
    """Every rank of the listed jobs as flat arrays (job order, rank order)."""

    owner: np.ndarray  # position of the rank's job in the list
    gpu: np.ndarray  # dense GPU index
    a: np.ndarray  # sec_per_step
    c: np.ndarray  # sec_per_sample
    cap: np.ndarray  # min(cap, B); B when uncapped
    fixed_b: np.ndarray  # the fixed split's batch (fixed jobs only, else nan)
    gpu_names: list[str]  # by dense GPU index


def gather(cluster: ClusterState, jobs: Sequence[int], flex: np.ndarray) -> Ranks:
    """Every rank of `jobs` (indices into the cluster), in job then rank order;
    `flex[i]` says whether the i-th listed job is re-split."""
    gpus: dict[str, int] = {}
    owner, gpu, a, c, cap, fb = [], [], [], [], [], []
    for i, j in enumerate(jobs):
        job = cluster.jobs[j]
        split = fixed_split(job) if not flex[i] else (np.nan,) * len(job.ranks)
        for r, b in zip(job.ranks, split):
            owner.append(i)
            gpu.append(gpus.setdefault(r.gpu, len(gpus)))
            a.append(r.sec_per_step)
            c.append(r.sec_per_sample)
            cap.append(min(r.cap, job.global_batch) if r.cap is not None else job.global_batch)
            fb.append(b)
    return Ranks(np.array(owner, dtype=int), np.array(gpu, dtype=int), np.array(a),
                 np.array(c), np.array(cap, dtype=float), np.array(fb, dtype=float), list(gpus))


def keys(rk: Ranks, flex: np.ndarray, big_b: np.ndarray, jobs: Sequence[str],
         comp_of: np.ndarray, shape: tuple[int, int]) -> Keys:
    """What each column and row of `assemble`'s matrix (of `shape`) stands
    for, by job, rank and GPU (`warm.Keys`): what carries a basis from one
    decision's program to the next one's."""
    n, fr = len(flex), flex[rk.owner]
    n_y = int(fr.sum())
    rank_cols = np.where(fr, np.cumsum(fr) - 1, -1)
    capped = fr & (rk.cap < big_b[rk.owner])
    n_gpu = len(rk.gpu_names)
    rank_rows = np.where(capped, n_gpu + np.cumsum(capped) - 1, -1)
    eq0 = n_gpu + int(capped.sum())
    first = np.zeros(n, dtype=bool)
    first[np.unique(comp_of, return_index=True)[1]] = True
    lam = np.where(first, n_y + n + comp_of, -1)
    batch = np.where(flex, eq0 + np.cumsum(flex) - 1, -1)
    fair0 = eq0 + int(flex.sum())
    return Keys(jobs, rk.gpu_names, np.r_[0, np.cumsum(np.bincount(rk.owner, minlength=n))],
                rk.gpu, rank_cols, rank_rows, np.stack([n_y + np.arange(n), lam], axis=1),
                np.stack([batch, fair0 + np.arange(n)], axis=1), np.arange(n_gpu), shape)


def assemble(rk: Ranks, flex: np.ndarray, big_b: np.ndarray, n_comp: int
              ) -> tuple[sp.csc_matrix, np.ndarray, np.ndarray, int]:
    """The constraint matrix (columns: y per splittable rank, s per job, lam
    per component), its row bounds, and the first demand row."""
    n, fr = len(flex), flex[rk.owner]
    n_y = int(fr.sum())
    y_col = np.cumsum(fr) - 1
    s_of = n_y + rk.owner
    n_gpu = int(rk.gpu.max()) + 1 if len(rk.gpu) else 0
    bo = big_b[rk.owner[fr]]
    # GPU rows: (a + c) s + c B y per splittable rank, (a + c b) s per fixed rank.
    rows, cols = [rk.gpu, rk.gpu[fr]], [s_of, y_col[fr]]
    vals = [rk.a + rk.c * np.where(fr, 1.0, rk.fixed_b), rk.c[fr] * bo]
    # y - (cap - 1) / B s <= 0 where a cap binds.
    capped = np.nonzero(rk.cap[fr] < bo)[0]
    cap_row = n_gpu + np.arange(len(capped))
    rows += [cap_row, cap_row]
    cols += [y_col[fr][capped], s_of[fr][capped]]
    vals += [np.ones(len(capped)), (1.0 - rk.cap[fr][capped]) / bo[capped]]
    # sum_k y - (1 - n / B) s = 0 per splittable job.
    eq0 = n_gpu + len(capped)
    flex_idx = np.nonzero(flex)[0]
    eq_of = np.full(n, -1)
    eq_of[flex_idx] = eq0 + np.arange(len(flex_idx))
    rows += [eq_of[rk.owner[fr]], eq_of[flex_idx]]
    cols += [y_col[fr], n_y + flex_idx]
    vals += [np.ones(n_y), np.bincount(rk.owner, minlength=n)[flex_idx] / big_b[flex_idx] - 1.0]
    # Demand rows delta lam - s <= 0: the lam coefficients start at 0 (off).
    fair0 = eq0 + len(flex_idx)
    rows.append(fair0 + np.arange(n))
    cols.append(n_y + np.arange(n))
    vals.append(-np.ones(n))
    n_row = fair0 + n
    mat = sp.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                        shape=(n_row, n_y + n + n_comp))
    row_lo = np.full(n_row, -np.inf)
    row_lo[eq0:fair0] = 0.0
    row_up = np.zeros(n_row)
    row_up[:n_gpu] = 1.0
    return mat, row_lo, row_up, fair0


def implied_upper(rk: Ranks, flex: np.ndarray, big_b: np.ndarray) -> np.ndarray:
    """Bounds every feasible point already obeys (a GPU gives at most all of
    its time): y <= 1 / (c B) per splittable rank, then per job
    s <= 1 / max_k (a_k + c_k b_k) with b_k = 1 (splittable) or its fixed batch."""
    fr = flex[rk.owner]
    per_step = rk.a + rk.c * np.where(fr, 1.0, rk.fixed_b)
    s_top = np.zeros(len(flex))
    np.maximum.at(s_top, rk.owner, per_step)
    return np.concatenate([1.0 / (rk.c[fr] * big_b[rk.owner[fr]]), 1.0 / s_top])


def implied_row_floor(mat: sp.csc_matrix, row_lo: np.ndarray, top: np.ndarray) -> np.ndarray:
    """Open row floors replaced by the least the row can be with 0 <= v <= top
    (demand coefficients added later are >= 0 on lam >= 0, so these hold).
    With every row and column boxed, the dual simplex needs no phase 1."""
    coo = mat.tocoo()
    least = np.bincount(coo.row, weights=np.minimum(coo.data, 0.0) * top[coo.col],
                        minlength=mat.shape[0])
    return np.where(np.isinf(row_lo), least, row_lo)


def share_basis(rk: Ranks, flex: np.ndarray, shape: tuple[int, int], eq0: int,
                basic: int, lower: int) -> tuple[np.ndarray, np.ndarray]:
    """Column and row status codes of the slack basis, except that each splittable
    job's batch row is met by the share of its cheapest-per-sample rank (basic
    in the row's place). It stays triangular, so non-singular, and spares the
    simplex a pivot per job and their fill-in (1000 jobs on 2048 GPUs: the
    throughput LP 4,400 -> 3,000 primal pivots, the first level LP 25 % fewer)."""
    fr = flex[rk.owner]
    own = rk.owner[fr]
    order = np.lexsort((rk.c[fr], own))  # by job, then cheapest rank first
    first = order[np.r_[True, own[order][1:] != own[order][:-1]]] if len(own) else order
    col = np.full(shape[1], lower)
    col[first] = basic  # y columns come first, in rank order
    row = np.full(shape[0], basic)
    row[eq0 + np.arange(len(first))] = lower  # the batch rows, in job order like `first`
    return col, row
