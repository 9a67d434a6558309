"""Placement rules: which GPUs an arriving job gets (pure, seeded).

Every rule sees only how many jobs sit on each GPU, never takes a GPU that
already holds `cap` jobs, and answers None when fewer than `need` GPUs have
room (the job then waits in the simulator's queue). The rules:

- `least-loaded` (default): the `need` GPUs with the fewest occupants, ties
  broken by a seeded random draw. Spreads contention evenly over a job's
  GPUs, which leaves little for re-splitting to fix.
- `packed`: first fit onto the lowest-numbered GPUs with room, the way
  bin-packing schedulers (e.g. Kubernetes' MostAllocated scoring) fill busy
  nodes before touching idle ones. Draws no random numbers.
- `random`: `need` GPUs drawn uniformly (seeded) among those with room, so a
  job's GPUs are unevenly contended by chance.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from gpufair.common.errors import InvalidArgument

_Rule = Callable[[list[int], Sequence[int], int, np.random.Generator], list[int]]


def _least_loaded(free: list[int], occ: Sequence[int], need: int,
                  rng: np.random.Generator) -> list[int]:
    ties = rng.random(len(free))
    order = sorted(range(len(free)), key=lambda i: (occ[free[i]], ties[i]))
    return [free[i] for i in order[:need]]


def _packed(free: list[int], occ: Sequence[int], need: int,
            rng: np.random.Generator) -> list[int]:
    return free[:need]


def _random(free: list[int], occ: Sequence[int], need: int,
            rng: np.random.Generator) -> list[int]:
    return [free[i] for i in rng.choice(len(free), size=need, replace=False)]


_RULES: dict[str, _Rule] = {"least-loaded": _least_loaded, "packed": _packed,
                            "random": _random}
DEFAULT_PLACEMENT = "least-loaded"


def placement_names() -> tuple[str, ...]:
    """Every placement rule, the default first."""
    return tuple(_RULES)


def check_placement(name: str) -> str:
    """Return `name` if it is a placement rule, else InvalidArgument naming the choices."""
    if name not in _RULES:
        raise InvalidArgument(f"unknown placement {name!r}; choose one of "
                              f"{', '.join(placement_names())}")
    return name


def choose_gpus(rule: str, occupancy: Sequence[int], need: int, cap: int,
                rng: np.random.Generator) -> tuple[int, ...] | None:
    """GPUs (ascending) for a job needing `need` of them, or None if it does not fit.

    `occupancy[g]` is how many jobs GPU g holds; none chosen may already hold `cap`."""
    if need < 1:
        raise InvalidArgument(f"a job needs at least 1 GPU, not {need}")
    pick = _RULES[check_placement(rule)]
    free = [g for g, n in enumerate(occupancy) if n < cap]
    if len(free) < need:
        return None
    return tuple(sorted(pick(free, occupancy, need, rng)))
