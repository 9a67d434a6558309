"""Placement rules: which GPUs an admitted job gets (pure, seeded).

Every rule chooses among *candidate* GPUs only: those with room for one
more resident job (`Levers.max_per_gpu`) and no job the newcomer cannot
share a GPU with (a pair measured unable to co-run). None means fewer than
`need` candidates; the job then stays queued. The rules:

- `least-loaded`: the candidates holding the fewest jobs, ties broken by a
  seeded random draw (Kubernetes' LeastAllocated scoring, GPU by GPU).
- `packed`: first fit onto the lowest-numbered candidates, the way
  bin-packing scorers (Kubernetes' MostAllocated) fill busy nodes first.
  Draws no random numbers.
- `random`: `need` candidates drawn uniformly (seeded).
- `sd`: the candidates with the smallest *score*, the caller's predicted
  slow-down of the jobs the newcomer would touch there (`arrival.py` and
  `sliced.py` say what they predict). The job's outcome is set by its
  worst GPU, so the smallest possible largest score is the `need`-th
  smallest score, and any `need` GPUs within it reach it: this choice is
  exact, not a heuristic. Among those it takes (multi-GPU jobs) GPUs all
  in one node when one node can hold it, preferring a node whose cache
  holds the job's dataset, then the node left fullest; there (given
  `gang`: per GPU the resident a newcomer there would newly hold back, -1
  for none) the GPUs that idle the fewest others first: a held multi-GPU
  job idles every GPU of its own, so a newcomer takes GPUs whose resident
  is held already (for at least the newcomer's time) or all of one
  resident's GPUs before part of another's;
  then the GPUs holding the fewest jobs, the lowest scores and numbers.

`covering` is the other way a waiting job may go (`arrival.drains` says
when): onto whole blocks, the sets of GPUs joined by the jobs resident on
them (`block_labels`), so that the residents it holds back are held on
every GPU of theirs and none idles for it.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from gpufair.common.errors import InvalidArgument
from gpufair.scheduler.policy.fleet import PLACEMENTS

DEFAULT_PLACEMENT = "least-loaded"
_Rule = Callable[[np.ndarray, np.ndarray, int, np.random.Generator], np.ndarray]


def _least_loaded(cand: np.ndarray, count: np.ndarray, need: int,
                  rng: np.random.Generator) -> np.ndarray:
    ties = rng.random(len(cand))
    return cand[np.lexsort((ties, count[cand]))[:need]]


def _packed(cand: np.ndarray, count: np.ndarray, need: int,
            rng: np.random.Generator) -> np.ndarray:
    return cand[:need]


def _random(cand: np.ndarray, count: np.ndarray, need: int,
            rng: np.random.Generator) -> np.ndarray:
    return cand[rng.choice(len(cand), size=need, replace=False)]


_RULES: dict[str, _Rule] = {"least-loaded": _least_loaded, "packed": _packed,
                            "random": _random}


def placement_names() -> tuple[str, ...]:
    """Every placement rule, the default first."""
    return PLACEMENTS


def check_placement(name: str) -> str:
    """Return `name` if it is a placement rule, else InvalidArgument naming the choices."""
    if name not in PLACEMENTS:
        raise InvalidArgument(f"unknown placement {name!r}; choose one of "
                              f"{', '.join(placement_names())}")
    return name


def gang_gpus(gang: np.ndarray) -> np.ndarray:
    """Per job index, the GPUs `gang` (per GPU; -1: none) names it on: where
    holding it back idles a GPU."""
    return np.bincount(gang[gang >= 0], minlength=int(gang.max(initial=-1)) + 1)


def _fewest_idled(pick_from: np.ndarray, need: int, order: np.ndarray, gang: np.ndarray) -> np.ndarray:
    """`need` GPUs of `pick_from` (in preference `order`) that newly hold back
    residents leaving the fewest of their other GPUs idle (module docstring)."""
    ranked = pick_from[order]
    chosen = [int(g) for g in ranked if gang[g] < 0][:need]
    groups: dict[int, list[int]] = {}  # in order of each one's best GPU
    for g in ranked:
        if gang[g] >= 0:
            groups.setdefault(int(gang[g]), []).append(int(g))
    size = gang_gpus(gang)  # the GPUs it would hold idle
    first = {k: i for i, k in enumerate(groups)}
    while len(chosen) < need and groups:
        left = need - len(chosen)
        # Idled: its GPUs not taken; ties to the gang whose best GPU comes first.
        k = min(groups, key=lambda k: (size[k] - min(len(groups[k]), left), first[k]))
        chosen += groups.pop(k)[:left]
    return np.array(chosen, dtype=int)


def _by_score(cand: np.ndarray, count: np.ndarray, need: int, score: np.ndarray,
              node: np.ndarray | None, cached: np.ndarray | None,
              gang: np.ndarray | None = None) -> np.ndarray:
    """The `sd` rule (module docstring); `cand` ascending."""
    bound = np.partition(score[cand], need - 1)[need - 1]
    # Every set within the bound is as good on the largest score: take the GPUs
    # holding the fewest jobs, preferring one node, then one caching the dataset,
    # then the node left fullest (best fit).
    tie = cand[score[cand] <= bound * (1 + 1e-9) + 1e-12]
    pick_from = tie
    if node is not None and (need > 1 or cached is not None):
        per_node = np.bincount(node[tie], minlength=int(node.max()) + 1)
        fits = np.flatnonzero(per_node >= need)
        if len(fits):
            is_cached = np.zeros(len(fits), dtype=bool)
            if cached is not None:
                node_cached = np.zeros(len(per_node), dtype=bool)
                node_cached[node[cached]] = True
                is_cached = node_cached[fits]
            chosen = fits[np.lexsort((fits, per_node[fits], ~is_cached))[0]]
            pick_from = tie[node[tie] == chosen]
        elif cached is not None:
            return tie[np.lexsort((tie, score[tie], count[tie], ~cached[tie]))[:need]]
    order = np.lexsort((pick_from, score[pick_from], count[pick_from]))
    if gang is not None:
        return _fewest_idled(pick_from, need, order, gang)
    return pick_from[order[:need]]


def choose(rule: str, need: int, candidates: np.ndarray, count: np.ndarray,
           rng: np.random.Generator, score: np.ndarray | None = None,
           node: np.ndarray | None = None, cached: np.ndarray | None = None,
           gang: np.ndarray | None = None) -> tuple[int, ...] | None:
    """GPU positions (ascending) for a job needing `need` GPUs, or None.

    `candidates`: the eligible GPU positions, ascending; `count[g]`: jobs on
    GPU g; `score`, `node`, `cached` (bool per GPU), `gang` (int per GPU) only
    matter to `sd`."""
    if need < 1:
        raise InvalidArgument(f"a job needs at least 1 GPU, not {need}")
    check_placement(rule)
    if len(candidates) < need:
        return None
    if rule == "sd":
        scores = score if score is not None else np.zeros(len(count))
        picked = _by_score(candidates, count, need, scores, node, cached, gang)
    else:
        picked = _RULES[rule](candidates, count, need, rng)
    return tuple(sorted(int(g) for g in picked))


def choose_gpus(rule: str, occupancy: Sequence[int], need: int, cap: int,
                rng: np.random.Generator) -> tuple[int, ...] | None:
    """`choose` over GPUs that hold fewer than `cap` jobs, no scores."""
    count = np.asarray(occupancy, dtype=int)
    return choose(rule, need, np.flatnonzero(count < cap), count, rng)


def block_labels(members: Sequence[Sequence[int]], n_gpu: int) -> np.ndarray:
    """Per GPU, its block's label: GPUs joined through resident jobs
    (`members`: each job's GPU positions) share one; an empty GPU has its own."""
    rows = [g for gpus in members for g in gpus[:-1]]
    cols = [g for gpus in members for g in gpus[1:]]
    graph = coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(n_gpu, n_gpu))
    return connected_components(graph, directed=False)[1]


def covering(labels: np.ndarray, ok: np.ndarray, occupied: np.ndarray,
             need: int, spare: int = 0) -> tuple[int, ...] | None:
    """`need` GPU positions (ascending) made of whole blocks (`block_labels`) all
    of whose GPUs are `ok`: the first sum to reach `need` with the empty GPUs
    tried first, then the largest blocks (so a block that alone makes up
    `need` wins over empty GPUs plus a smaller block). Where no blocks sum to
    `need`, `need` GPUs, empty ones first, of the blocks with the smallest
    sum up to `need + spare`: the rest idle, their residents held back. None
    when no such blocks add up."""
    order = np.argsort(labels, kind="stable")
    cuts = np.flatnonzero(np.diff(labels[order])) + 1
    blocks = [b for b in np.split(order, cuts) if ok[b].all()]
    blocks.sort(key=lambda b: (bool(occupied[b].any()), -len(b), int(b[0])))
    reach: dict[int, tuple[int, ...]] = {0: ()}  # GPUs taken -> the blocks taking them
    for i, block in enumerate(blocks):
        for total, used in list(reach.items()):
            if total + len(block) <= need + spare and total + len(block) not in reach:
                reach[total + len(block)] = (*used, i)
        if need in reach:
            return tuple(sorted(int(x) for k in reach[need] for x in blocks[k]))
    over = [total for total in reach if total > need]
    if not over:
        return None
    gpus = np.concatenate([blocks[k] for k in reach[min(over)]])
    gpus = gpus[np.argsort(occupied[gpus], kind="stable")][:need]
    return tuple(sorted(int(x) for x in gpus))
