"""Cost and interference model calibrated from Gavel's measured throughputs.

File format (Gavel `physical_cluster_throughputs.json`): GPU type -> job key
`"('<model> (batch size N)', <gpus>)"` -> `"null"` (isolated steps/s) or
another job key -> `[own, other]` steps/s while the two share the GPU(s).
A bare model name as key (Gavel's simulator files) means 1 GPU.
Gavel counts a multi-GPU job's steps over all its workers, each working on
the key's batch size, so samples/s = steps/s x batch at every scale.

What we take from it, per GPU type:
- 1-GPU cost: the isolated step time t0 = 1/steps_per_s at the profiled
  batch b0, split into a fixed part a and a per-sample part c (t0 = a + c*b0).
  a comes from a least-squares line through the model family's batch sizes
  (e.g. all "ResNet-18 (batch size *)"), clipped to [0, t0/2]; a family with
  one point gets a = t0/10.
- N-GPU speed: where the file measures the model at N GPUs (keys with N > 1),
  each rank's step there takes tN = N / steps_per_s; the gap to t0 is the
  model's per-step synchronisation cost at that scale
  (`gpufair.common.steptime.Scaling`, which also says how unmeasured scales
  and superlinear ones are treated; one Gavel p100 key is superlinear). A
  job alone on N GPUs at the even split then runs exactly at the measured
  speed; a model measured at 1 GPU only scales linearly.
- interference: f(j|k) = own/isolated, the fraction of its isolated speed job
  j keeps next to k, from the 1-GPU keys. Plain time-slicing of a pair would
  give 1/2, so the pair's efficiency is eta = 2*f: per-sample and per-step
  costs on that GPU are divided by eta (eta > 1: the pair packs better than
  time-slicing). A rank of a multi-GPU job uses its model's 1-GPU pairs:
  Gavel measured pairs only at 1 GPU, so its multi-GPU keys' `[0, 0]` mean
  "not measured", never "cannot co-run".
- three or more jobs on a GPU: eta = 2 * mean_k f(j|k) over the neighbours
  (pairwise effects average, not compound); the time itself is then divided
  by the processor-sharing model, so n jobs each get ~eta/n of their speed.
- a 1-GPU pair measured `[0, 0]` while both ran alone could not co-run (e.g.
  memory): `compatible` says no, and no placement rule puts the two on one
  GPU. Unmeasured pairs fall back to pure time-slicing, eta = 1.
- eta is clipped to [0.25, 1]: only interference *losses* count. Packing
  gains (f > 1/2, about half the measured pairs) are dropped, because in a
  time-sliced model a job whose neighbour is waiting would otherwise run
  faster than it does alone. This understates what co-location can give,
  equally for every policy.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping, Sequence

import numpy as np

from gpufair.common.errors import InvalidArgument
from gpufair.common.steptime import Scaling, StepTimeModel

_BATCH = re.compile(r"^(?P<family>.*?) \(batch size (?P<batch>\d+)\)$")


@dataclass(frozen=True)
class RankCost:
    """Exclusive per-rank cost of a model at one GPU count: a + c * batch."""

    sec_per_step: float  # fixed part, synchronisation included
    sec_per_sample: float

    def step_time(self, batch: float) -> float:
        """Seconds of one exclusive step of `batch` samples on this rank."""
        return self.sec_per_step + self.sec_per_sample * batch


@dataclass(frozen=True)
class ModelCost:
    """Isolated cost of one model: 1-GPU step time = a + c * batch, and what
    the measured N-GPU speeds add (`scaling`, gpufair.common.steptime)."""

    model: str
    sec_per_step: float
    sec_per_sample: float
    profiled_batch: int
    scaling: Scaling = field(default_factory=Scaling)

    def at(self, num_gpus: int) -> RankCost:
        """Each rank's exclusive cost when the model runs on `num_gpus` GPUs."""
        step = StepTimeModel(self.sec_per_step, self.sec_per_sample, self.scaling)
        return RankCost(*step.costs(num_gpus))


@dataclass(frozen=True)
class Colocation:
    """Costs and pairwise interference for one GPU type."""

    gpu_type: str
    costs: Mapping[str, ModelCost]
    pair_fraction: Mapping[tuple[str, str], float]
    forbidden: frozenset[tuple[str, str]] = frozenset()  # both orders present

    def efficiency(self, model: str, neighbours: Sequence[str]) -> float:
        """eta for `model` sharing a GPU with `neighbours` (see module doc)."""
        if not neighbours:
            return 1.0
        fractions = [self.pair_fraction.get((model, k), 0.5) for k in neighbours]
        return min(max(2.0 * float(np.mean(fractions)), 0.25), 1.0)

    def compatible(self, model: str, other: str) -> bool:
        """False when the pair was measured unable to share a GPU."""
        return (model, other) not in self.forbidden

    def cost(self, model: str) -> ModelCost:
        """The model's cost; InvalidArgument naming it if unknown."""
        try:
            return self.costs[model]
        except KeyError:
            raise InvalidArgument(f"model {model!r} has no usable measurement for "
                                  f"GPU type {self.gpu_type!r}") from None

    def scales_measured(self, model: str) -> tuple[int, ...]:
        """GPU counts at which `model` ran alone on this GPU type (1 included)."""
        return (1, *sorted(self.cost(model).scaling.measured))


def parse_key(key: str) -> tuple[str, int]:
    """("model", gpus) from a key: a tuple string, or a bare model name meaning
    1 GPU (the format of Gavel's simulator files, e.g. `oracle_throughputs.json`)."""
    if not key.lstrip().startswith("("):
        if not key.strip():
            raise InvalidArgument("co-location key is empty; want a model name or a "
                                  "('model', gpus) tuple")
        return key, 1
    try:
        model, gpus = ast.literal_eval(key)
        return str(model), int(gpus)
    except (ValueError, SyntaxError, TypeError):
        raise InvalidArgument(f"co-location key {key!r} is not a ('model', gpus) tuple") from None


def model_family(model: str) -> tuple[str, int]:
    """(family, per-rank batch) of a Gavel model name: "ResNet-18 (batch size
    64)" is ("ResNet-18", 64); a name without a batch size is its own family
    at batch 1."""
    m = _BATCH.match(model)
    return (m["family"], int(m["batch"])) if m else (model, 1)


def _fit_costs(isolated: dict[str, float]) -> dict[str, ModelCost]:
    families: dict[str, list[tuple[int, float]]] = {}
    for model, steps in isolated.items():
        fam, b = model_family(model)
        families.setdefault(fam, []).append((b, 1.0 / steps))
    out = {}
    for model, steps in isolated.items():
        fam, b0 = model_family(model)
        t0 = 1.0 / steps
        pts = families[fam]
        a = t0 / 10
        if len({p[0] for p in pts}) >= 2:
            intercept = float(np.polyfit([p[0] for p in pts], [p[1] for p in pts], 1)[1])
            a = min(max(intercept, 0.0), t0 / 2)
        out[model] = ModelCost(model, a, (t0 - a) / b0, b0)
    return out


def _positive(value: object) -> float | None:
    ok = isinstance(value, (int, float)) and math.isfinite(value) and value > 0
    return float(value) if ok else None


def read_file(path: str | Path) -> object:
    """A Gavel-format file's JSON, or InvalidArgument saying why not."""
    try:
        return json.loads(Path(path).read_text())
    except OSError as e:
        raise InvalidArgument(f"cannot read co-location file {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise InvalidArgument(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None


def gpu_types(path: str | Path) -> tuple[str, ...]:
    """The GPU types a Gavel-format file measures, in file order."""
    raw = read_file(path)
    if not isinstance(raw, dict):
        raise InvalidArgument(f"{path}: not a GPU type -> measurements object")
    return tuple(k for k, v in raw.items() if isinstance(v, dict))


def load_colocation(path: str | Path, gpu_type: str) -> Colocation:
    """Read a Gavel-format file and build the model for `gpu_type`."""
    raw = read_file(path)
    if not isinstance(raw, dict) or gpu_type not in raw or not isinstance(raw[gpu_type], dict):
        types = ", ".join(sorted(raw)) if isinstance(raw, dict) else "none"
        raise InvalidArgument(f"GPU type {gpu_type!r} not in {path} (has: {types})")
    isolated: dict[str, float] = {}
    multi: dict[str, dict[int, float]] = {}
    measured: dict[tuple[str, str], tuple[float, float]] = {}
    for key, entry in raw[gpu_type].items():
        model, gpus = parse_key(key)
        if not isinstance(entry, dict):
            continue
        iso = _positive(entry.get("null"))
        if iso is None:
            continue  # never ran alone at this scale on this GPU type (e.g. out of memory)
        if gpus > 1:
            multi.setdefault(model, {})[gpus] = iso
            continue
        isolated[model] = iso
        for other, val in entry.items():
            if other == "null" or not isinstance(val, list) or len(val) != 2:
                continue
            other_model, other_gpus = parse_key(other)
            if other_gpus == 1 and all(isinstance(v, (int, float)) for v in val):
                measured[(model, other_model)] = (float(val[0]), float(val[1]))
    if not isolated:
        raise InvalidArgument(f"{path}: no isolated 1-GPU throughputs for {gpu_type!r}")
    costs = _fit_costs(isolated)
    for model, scales in multi.items():
        if model in costs:
            costs[model] = ModelCost(costs[model].model, costs[model].sec_per_step,
                                     costs[model].sec_per_sample, costs[model].profiled_batch,
                                     Scaling.from_steps(1 / isolated[model],
                                                        {n: n / st for n, st in scales.items()}))
    pairs = {k: own / isolated[k[0]] for k, (own, other) in measured.items()
             if own > 0 and other > 0}
    forbidden = {k for k, (own, other) in measured.items()
                 if own == 0 and other == 0 and k[1] in isolated}
    forbidden |= {(b, a) for a, b in forbidden}
    return Colocation(gpu_type, MappingProxyType(costs), MappingProxyType(pairs),
                      frozenset(forbidden))
