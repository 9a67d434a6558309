"""The time-slicing cost model shared by every policy and by the simulator.

A rank's step needs `w = sec_per_step + sec_per_sample * b` seconds of GPU
time. A GPU divides its time among its occupants max-min fairly
(processor sharing with demands): a synchronous job whose rank waits on a
slower rank elsewhere only takes the share it needs, and what it leaves goes
to the neighbours. At `x_j` steps/s a rank of job j uses `u = w * x_j` of its
GPU, and the steady state is the speeds where
  * no GPU is used beyond its time (sum of u <= 1), and
  * every job has a bottleneck: a rank on a full GPU whose u is the largest
    there (it would take any extra time and the GPU has none to give);
every other rank simply gets what it asks for. On every cluster checked
(exhaustively on small ones, by MILP on larger ones) exactly one steady
state exists.

This is rationing, not max-min fairness over jobs, and progressive filling
does not find it: a GPU that fills first later loses time to a neighbour
held back elsewhere that speeds up, so the jobs frozen there slow down again
(the tests pin a two-job case). Damped iteration of GPU shares does not
settle either (it cycles, off by tens of per cent). What works: a best
response on job speeds (each job moves halfway to the speed its tightest
rank could get if it wanted more, `_could_get`) and, whenever the tightest
ranks change, the exact speeds that this choice of bottlenecks implies (one
linear equation per full GPU), kept only if they pass the conditions above.
Close to the steady state the tightest ranks are bottlenecks of it, so the
check passes and the answer is exact, after 2-7 steps on average and 37 at
most on thousands of random and benchmark clusters. `_MAX_STEPS` bounds the
loop (never reached in tests); were it reached, the last best-response
speeds would be returned, close but not exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spl

from gpufair.scheduler.policy.types import JobState

# A job's best response falls as its neighbours speed up, which can see-saw
# (undamped, it cycles on some simulator snapshots); half steps settle, and
# the step halves again every `_PATIENCE` steps without an exact answer.
_THETA = 0.5
_PATIENCE = 100
_MAX_STEPS = 300
_TOL = 1e-11  # relative slack when checking a candidate steady state
_TIE = 1e-9  # ranks this close to their job's tightest count as tied
_DENSE = 100  # linear systems up to this size are solved dense


@dataclass(frozen=True)
class SharedRates:
    """Steady-state speeds under time-slicing for given splits."""

    rates: np.ndarray  # samples/s per job, in input order
    gpu_busy: dict[str, float]  # fraction of each GPU's time in use
    shares: tuple[np.ndarray, ...] = ()  # per job, per rank: GPU share it could get


def even_split(total: int, n: int) -> tuple[int, ...]:
    """B/n per rank, the remainder spread one each over the first ranks."""
    q, rem = divmod(total, n)
    return tuple(q + (1 if i < rem else 0) for i in range(n))


def fallback_exclusive_rate(job: JobState) -> float:
    """Exclusive speed when no profile exists: an even split at the best
    per-sample and per-step cost seen on any rank (an upper bound on speed,
    so an estimated slow-down is never understated)."""
    c = min(r.sec_per_sample for r in job.ranks)
    a = min(r.sec_per_step for r in job.ranks)
    return job.global_batch / (a + c * -(-job.global_batch // len(job.ranks)))  # even's largest


def exclusive_rate(job: JobState) -> float:
    """The profiled exclusive speed, else the documented fallback."""
    if job.exclusive_rate is not None and job.exclusive_rate > 0:
        return job.exclusive_rate
    return fallback_exclusive_rate(job)


def slowdown(job: JobState, rate: float) -> float:
    """SD = (elapsed + remaining / rate) / (total / exclusive rate)."""
    remaining = max(job.samples_total - job.samples_done, 0.0)
    alone = job.samples_total / exclusive_rate(job)
    if rate <= 0:
        return float("inf")
    return (job.elapsed_s + remaining / rate) / alone


def _could_get(u: np.ndarray, gpu: np.ndarray, n_gpu: int) -> np.ndarray:
    """Per rank: its max-min share of its GPU if it wanted more time while
    the other ranks there keep demanding `u` (capacity 1 per GPU).

    A rank at or above its GPU's water level gets the level. For one below
    it, at position p of its GPU's m demands sorted ascending (0-based), the
    level with its own demand unbounded is capped by the first i > p with
    `sum(u_0..u_i) - u_p + (m - i) u_i >= 1` (then ranks i.. and p share
    what the others leave), else it gets its own use plus the idle time.
    The left side grows with i, so a vectorised bisection finds i."""
    n = len(u)
    order = np.lexsort((u, gpu))
    d, g = u[order], gpu[order]
    count = np.bincount(g, minlength=n_gpu)
    start = np.concatenate(([0], np.cumsum(count)[:-1]))[g]
    m = count[g]
    pos = np.arange(n) - start
    incl = np.cumsum(d)
    incl -= (incl - d)[start]  # running total within the GPU, this rank included
    before = incl - d
    hit = before + (m - pos) * d >= 1.0
    first = np.full(n_gpu, n)
    np.minimum.at(first, g[hit], np.nonzero(hit)[0])
    top = first[g] - start  # per rank: where its GPU's level is capped (m: nowhere)
    top = np.where(top < m, top, m)
    level = (1.0 - before[np.minimum(start + top, n - 1)]) / np.maximum(m - top, 1)
    below = pos < top
    lo, hi = pos + 1, top.copy()
    while True:
        run = below & (lo < hi)
        if not run.any():
            break
        mid = (lo + hi) // 2
        at = start + np.minimum(mid, m - 1)
        caps = incl[at] - d + (m - mid) * d[at] >= 1.0
        hi = np.where(run & caps, mid, hi)
        lo = np.where(run & ~caps, mid + 1, lo)
    at = start + np.minimum(lo, m - 1)
    capped = (1.0 - (before[at] - d)) / (m - lo + 1)
    spare = 1.0 - (incl[start + m - 1] - d)
    out = np.empty(n)
    out[order] = np.where(~below, level, np.where(lo < m, capped, spare))
    return out


def _bottlenecks(ratio: np.ndarray, ji: np.ndarray, gi: np.ndarray, n_job: int) -> np.ndarray:
    """Per job, the rank with the least `could_get / w`. Near-ties go to the
    lowest GPU index, so jobs tied between the same GPUs agree on one and the
    structure's linear system stays regular."""
    best = np.full(n_job, np.inf)
    np.minimum.at(best, ji, ratio)
    tied = ratio <= best[ji] * (1 + _TIE)
    order = np.lexsort((gi, ~tied, ji))
    first = np.ones(len(ji), dtype=bool)
    first[1:] = ji[order][1:] != ji[order][:-1]
    arg = np.empty(n_job, dtype=int)
    arg[ji[order][first]] = order[first]
    return arg


def _solve_structure(arg: np.ndarray, ji: np.ndarray, gi: np.ndarray, w: np.ndarray,
                     n_gpu: int) -> np.ndarray | None:
    """Speeds if each job's bottleneck is the rank `arg[j]`, on a full GPU.

    Job j then runs at `x_j = L_g / w_arg` for its bottleneck GPU g's level
    L_g, and every such GPU is full: `sum_r w_r L_{g(j_r)} / w_arg(j_r) = 1`,
    one equation per bottleneck GPU."""
    sat, col = np.unique(gi[arg], return_inverse=True)
    row = np.full(n_gpu, -1)
    row[sat] = np.arange(len(sat))
    r = row[gi]
    on = r >= 0
    coef = w[on] / w[arg[ji[on]]]
    n = len(sat)
    try:
        if n <= _DENSE:
            a = np.zeros((n, n))
            np.add.at(a, (r[on], col[ji[on]]), coef)
            level = np.linalg.solve(a, np.ones(n))
        else:
            a = sp.csc_matrix((coef, (r[on], col[ji[on]])), shape=(n, n))
            level = spl.splu(a).solve(np.ones(n))
    except (np.linalg.LinAlgError, RuntimeError):  # singular: a structure that cannot hold
        return None
    return level[col] / w[arg]


def _is_steady(x: np.ndarray, ji: np.ndarray, gi: np.ndarray, w: np.ndarray,
               n_gpu: int) -> bool:
    """The conditions of the module docstring, to a relative `_TOL`."""
    if not np.all(np.isfinite(x) & (x > 0)):
        return False
    u = w * x[ji]
    load = np.bincount(gi, weights=u, minlength=n_gpu)
    if load.max() > 1 + _TOL:
        return False
    top = np.zeros(n_gpu)
    np.maximum.at(top, gi, u)
    elastic = (load[gi] >= 1 - _TOL) & (u >= top[gi] * (1 - _TOL))
    return bool(np.bincount(ji, weights=elastic, minlength=len(x)).min() > 0)


def _speeds(ji: np.ndarray, gi: np.ndarray, w: np.ndarray, n_job: int,
            n_gpu: int) -> np.ndarray:
    """Steps/s per job at the steady state (ranks with w > 0 only)."""
    x = np.full(n_job, np.inf)
    np.minimum.at(x, ji, 1.0 / (np.bincount(gi, minlength=n_gpu)[gi] * w))
    tried = None
    for step in range(_MAX_STEPS):
        ratio = _could_get(w * x[ji], gi, n_gpu) / w
        arg = _bottlenecks(ratio, ji, gi, n_job)
        if tried is None or not np.array_equal(arg, tried):
            tried = arg
            exact = _solve_structure(arg, ji, gi, w, n_gpu)
            if exact is not None and _is_steady(exact, ji, gi, w, n_gpu):
                return exact
        best = np.full(n_job, np.inf)
        np.minimum.at(best, ji, ratio)
        x += _THETA / 2 ** (step // _PATIENCE) * (best - x)
    return x


def shared_rates(jobs: tuple[JobState, ...] | list[JobState],
                 splits: list[tuple[int, ...]] | None = None) -> SharedRates:
    """Predict every job's speed when the GPUs are time-sliced among them.

    `shares` holds, per rank, `_could_get` at the steady state: the share of
    its GPU it would get if it asked for more, the neighbours unchanged."""
    gpu_names: dict[str, int] = {}
    job_idx, gpu_idx, work = [], [], []
    for j, job in enumerate(jobs):
        split = job.split if splits is None else splits[j]
        for rank, b in zip(job.ranks, split):
            job_idx.append(j)
            gpu_idx.append(gpu_names.setdefault(rank.gpu, len(gpu_names)))
            work.append(rank.step_time(b))
    if not jobs:
        return SharedRates(np.zeros(0), {}, ())
    ji, gi = np.array(job_idx, dtype=int), np.array(gpu_idx, dtype=int)
    w = np.array(work, dtype=float)
    n_job, n_gpu = len(jobs), len(gpu_names)
    # A rank with no work never holds its job back; a job with none at all is infinitely fast.
    busy_rank = w > 0
    steps = np.full(n_job, np.inf)
    movers, sub = np.unique(ji[busy_rank], return_inverse=True)
    if len(movers):
        steps[movers] = _speeds(sub, gi[busy_rank], w[busy_rank], len(movers), n_gpu)
    used = np.zeros(len(w))
    used[busy_rank] = w[busy_rank] * steps[ji[busy_rank]]
    busy = np.bincount(gi, weights=used, minlength=n_gpu)
    avail = np.minimum(_could_get(used, gi, n_gpu), 1.0)
    per_job = tuple(np.split(avail, np.cumsum([len(job.ranks) for job in jobs])[:-1]))
    batches = np.array([job.global_batch for job in jobs], dtype=float)
    return SharedRates(batches * steps, {g: float(busy[i]) for g, i in gpu_names.items()},
                       per_job)
