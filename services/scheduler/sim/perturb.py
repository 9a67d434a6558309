"""Another GPU type to test on: a measured type's Gavel-format entries with
every model's speed, every pair's interference and which pairs can co-run
drawn afresh around the measured ones (pure; `bench/scheduler/
perturb_colocation.py` writes them to a file).

Per model, one speed factor, log-uniform in `SPEED_RANGE`, scales its
isolated throughput at every scale and its own part of every pair it is in,
so jobs' lengths change relative to each other. Each multi-GPU scale's
throughput is further scaled by a factor in `SCALING_RANGE` (a different
interconnect). Each measured pair keeps its `[own, other]` shape with both
scaled by one factor in `PAIR_RANGE` (interference stronger or weaker), or,
a 1-GPU pair with probability `forbid`, becomes `[0, 0]`: the pair cannot
co-run (a GPU with less memory). A pair is drawn once, for both of its
entries (A's for B and B's for A). Pairs measured `[0, 0]` stay so.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from gpufair.common.errors import InvalidArgument
from gpufair.scheduler.sim.colocation import parse_key

SPEED_RANGE = (0.4, 2.5)
SCALING_RANGE = (0.85, 1.1)
PAIR_RANGE = (0.7, 1.3)


def perturb_type(entries: Mapping[str, object], seed: int,
                 forbid: float = 0.15) -> dict[str, object]:
    """One GPU type's entries (key -> {other key or "null" -> value}) redrawn
    with `seed` (module docstring); entries that are not objects are kept."""
    if not 0.0 <= forbid <= 1.0:
        raise InvalidArgument(f"forbid must be a fraction in [0, 1], not {forbid}")
    rng = np.random.default_rng(seed)
    models = sorted({parse_key(k)[0] for k in entries} | {
        parse_key(other)[0] for entry in entries.values() if isinstance(entry, dict)
        for other in entry if other != "null"})
    low, high = np.log(SPEED_RANGE)
    speed = {m: float(np.exp(rng.uniform(low, high))) for m in models}
    drawn: dict[tuple[str, str], tuple[bool, float]] = {}  # a pair -> (forbidden, factor)
    out: dict[str, object] = {}
    for key, entry in entries.items():
        if not isinstance(entry, dict):
            out[key] = entry
            continue
        model, gpus = parse_key(key)
        new: dict[str, object] = {}
        for other, pair in entry.items():
            if other == "null" or not (isinstance(pair, list) and len(pair) == 2 and all(
                    isinstance(v, (int, float)) for v in pair)):
                new[other] = pair
                continue
            other_model, other_gpus = parse_key(other)
            link = (min(key, other), max(key, other))
            if link not in drawn:
                single = gpus == 1 and other_gpus == 1
                drawn[link] = (single and bool(rng.random() < forbid),
                               float(rng.uniform(*PAIR_RANGE)))
            forbidden, f = drawn[link]
            own, theirs = pair
            new[other] = [0.0, 0.0] if forbidden else [own * speed[model] * f,
                                                     theirs * speed[other_model] * f]
        alone = entry.get("null")
        if isinstance(alone, (int, float)):
            scale = 1.0 if gpus == 1 else float(rng.uniform(*SCALING_RANGE))
            new["null"] = alone * speed[model] * scale
        out[key] = new
    return out


def perturb_file(raw: object, names: Sequence[str] = (), seeds: Sequence[int] = (1,),
                 forbid: float = 0.15) -> dict[str, object]:
    """A Gavel-format object with type `<type>-s<seed>` for each type `names`
    lists (default every type in `raw`) and each seed."""
    if not isinstance(raw, dict):
        raise InvalidArgument("not a GPU type -> measurements object")
    measured = [k for k, v in raw.items() if isinstance(v, dict)]
    for name in names:
        if name not in measured:
            raise InvalidArgument(f"GPU type {name!r} not in the file (has: {', '.join(measured)})")
    return {f"{name}-s{seed}": perturb_type(raw[name], seed, forbid)
            for name in (names or measured) for seed in seeds}
