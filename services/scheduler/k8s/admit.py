"""One admission round on Kubernetes: recorded Nodes and Pods in, which gated
jobs to admit onto which nodes, and the patches that do it, out (pure).

- Each Ready, uncordoned node offers its allocatable `nvidia.com/gpu` minus
  what its pods hold: bound pods, and pods pinned to it by name whose
  gpufair gate is gone (admitted, not yet bound). A node with a pod that
  cannot be read is left out this round: never hand out GPUs it may hold.
- Each free GPU becomes a `Gpu(name, node)` holding at most one job: the
  device plugin gives a unit to one pod. The policy core's round
  (`plan_round`, the `gpufair` preset) orders the waiting jobs (slow-down
  deadlines) and decides who starts and on which GPUs: one node when one
  can hold the job, preferring a node whose cache holds its dataset, then
  the node left fullest.
- The planner sees neither pods nor Kubernetes' node rules, so its choice is
  realised pod by pod: each pod goes to a node it may use (`fit.py`) with
  room for all its GPUs, on the planner's nodes first, else on any such node
  (one node if one can take the whole job). A job is admitted whole or not
  at all; a job that can never start alone is not offered to the planner,
  so it cannot hold GPUs back from jobs that can.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpufair.scheduler.k8s.fit import fits
from gpufair.scheduler.k8s.gangs import Gang, Hold, fleet_job, gangs
from gpufair.scheduler.k8s.objects import (GATE, GPU_PRODUCT_LABEL, NodeView, Obj, ObjectError, PodView, parse_node,
                                           parse_pod)
from gpufair.scheduler.k8s.patch import Op, admit_ops, reason_ops
from gpufair.scheduler.policy.admission import plan_round
from gpufair.scheduler.policy.fleet import PRESETS, Gpu, Levers
from gpufair.scheduler.snapshot import Profiles

#: The planner's levers on Kubernetes: gpufair's, with one job per GPU unit.
LEVERS = replace(PRESETS["gpufair"], max_per_gpu=1)


@dataclass(frozen=True)
class Context:
    """What a round knows besides the API objects."""

    now: float
    namespace: str  # gated pods elsewhere are not admitted
    profiles: Profiles = field(default_factory=dict)  # (model, device type) -> step-time fit
    cached: Mapping[str, frozenset[str]] = field(default_factory=dict)  # canonical dataset URI -> nodes caching it
    levers: Levers = LEVERS
    seed: int = 0


@dataclass(frozen=True)
class Admit:
    """A job admitted now: each pod's node ("" for a pod holding no GPU), by `namespace/name`."""

    job: str
    nodes: Mapping[str, str]


@dataclass(frozen=True)
class Wait:
    """A job (or a pod without one) left gated, and why; pods by `namespace/name`."""

    job: str
    reason: str
    pods: tuple[str, ...]


@dataclass(frozen=True)
class PodPatch:
    namespace: str
    name: str
    ops: tuple[Op, ...]
    admits: bool  # True: lifts the gate; False: only records the reason


@dataclass(frozen=True)
class Decision:
    admitted: tuple[Admit, ...] = ()
    waiting: tuple[Wait, ...] = ()
    patches: tuple[PodPatch, ...] = ()
    problems: tuple[str, ...] = ()  # objects that could not be read
    free: Mapping[str, int] = field(default_factory=dict)  # node -> free GPUs before this round


def _read(nodes_json: Sequence[Obj], pods_json: Sequence[Obj]
          ) -> tuple[list[NodeView], list[PodView], set[str], list[str]]:
    nodes, pods, unsure, problems = [], [], set(), []
    for raw in nodes_json:
        try:
            nodes.append(parse_node(raw))
        except ObjectError as exc:
            problems.append(f"skipped: {exc}")
    for raw in pods_json:
        try:
            pods.append(parse_pod(raw))
        except ObjectError as exc:
            spec = raw.get("spec") if isinstance(raw, Mapping) else None
            bound = spec.get("nodeName") if isinstance(spec, Mapping) else None
            if isinstance(bound, str) and bound:
                unsure.add(bound)
            problems.append(f"skipped: {exc}" + (f" (node {bound} left out this round)" if bound else ""))
    return nodes, pods, unsure, problems


def free_gpus(nodes: Sequence[NodeView], pods: Sequence[PodView], unsure: set[str] = frozenset()) -> dict[str, int]:
    """Free GPUs of every usable node with any (module docstring)."""
    used: Counter[str] = Counter()
    for p in pods:
        if p.terminal or GATE in p.gates:
            continue
        where = p.node_name or p.pinned_node
        if where:
            used[where] += p.gpus
    return {n.name: max(n.gpus - used[n.name], 0) for n in sorted(nodes, key=lambda n: n.name)
            if n.usable and n.gpus > 0 and n.name not in unsure}


def _pack(pods: Sequence[PodView], room: Mapping[str, int], order: Sequence[str],
          nodes: Mapping[str, NodeView]) -> dict[str, str] | None:
    """Pod key -> node within `room`, nodes tried in `order` (a pod holding no GPU: ""):
    one node for the whole gang if one can take it, else first fit, largest pods first."""
    gpu_pods = sorted((p for p in pods if p.gpus), key=lambda p: (-p.gpus, p.name))
    placed = {p.key: "" for p in pods if not p.gpus}
    for n in order:
        if room.get(n, 0) >= sum(p.gpus for p in gpu_pods) and all(fits(p, nodes[n]) for p in gpu_pods):
            return {**placed, **{p.key: n for p in gpu_pods}}
    left = dict(room)
    for p in gpu_pods:
        n = next((n for n in order if left.get(n, 0) >= p.gpus and fits(p, nodes[n])), None)
        if n is None:
            return None
        left[n] -= p.gpus
        placed[p.key] = n
    return placed


def _fallback_order(free: Mapping[str, int], cached: frozenset[str]) -> list[str]:
    """Cached nodes first, then the fullest (best fit), then by name."""
    return sorted(free, key=lambda n: (n not in cached, free[n], n))


def _device_type(gang: Gang, free: Mapping[str, int], nodes: Mapping[str, NodeView], profiles: Profiles) -> str:
    """The GPU model most of the job's usable free GPUs have, among those with a profile of its model."""
    count: Counter[str] = Counter()
    for n, k in free.items():
        kind = nodes[n].labels.get(GPU_PRODUCT_LABEL, "")
        if (gang.model, kind) in profiles and fits(gang.pods[0], nodes[n]):
            count[kind] += k
    return count.most_common(1)[0][0] if count else ""


def _offer(ready: list[Gang], free: dict[str, int], nodes: dict[str, NodeView], ctx: Context
           ) -> tuple[list[Gang], list[Wait]]:
    """The gangs that could start now on their own; the others wait, and why."""
    offered, waits = [], []
    total = sum(free.values())
    for g in ready:
        if _pack(g.pods, free, _fallback_order(free, ctx.cached.get(g.dataset, frozenset())), nodes) is not None:
            offered.append(g)
        elif g.gpus > total:
            waits.append(Wait(g.job, f"needs {g.gpus} GPUs; {total} free on {len(free)} nodes", _names(g)))
        else:
            waits.append(Wait(g.job, f"its pods ({', '.join(str(p.gpus) for p in g.pods)} GPUs) do not fit on "
                                     f"the free GPUs of nodes they may use", _names(g)))
    return offered, waits


def _place(ready: list[Gang], free: dict[str, int], nodes: dict[str, NodeView], ctx: Context
           ) -> tuple[list[Admit], list[Wait]]:
    """Plan the round over the free GPUs, then realise each admitted gang pod by pod (module docstring)."""
    admits = [Admit(g.job, {p.key: "" for p in g.pods}) for g in ready if not g.gpus]
    offered, waits = _offer([g for g in ready if g.gpus], free, nodes, ctx)
    if not offered:
        return admits, waits
    gpus = [Gpu(f"{n}/{i}", n) for n in free for i in range(free[n])]
    node_of = {g.name: g.node for g in gpus}
    jobs = [fleet_job(g, ctx.profiles.get((g.model, _device_type(g, free, nodes, ctx.profiles))),
                      ctx.cached.get(g.dataset, frozenset())) for g in offered]
    plan = plan_round(jobs, gpus, ctx.now, ctx.levers, seed=ctx.seed)
    queued = {e.job: e.reason for e in plan.queue}
    left = dict(free)
    for g in sorted(offered, key=lambda g: plan.priority.get(g.job, len(offered))):
        if g.job not in plan.admitted:
            waits.append(Wait(g.job, f"queued: {queued.get(g.job, 'not admitted this round')}", _names(g)))
            continue
        chosen = Counter(node_of[name] for name in plan.admitted[g.job])
        first = sorted(chosen, key=lambda n: (-chosen[n], n))
        placed = _pack(g.pods, {n: min(chosen[n], left[n]) for n in first}, first, nodes) or \
            _pack(g.pods, left, _fallback_order(left, ctx.cached.get(g.dataset, frozenset())), nodes)
        if placed is None:
            waits.append(Wait(g.job, "the GPUs it could use went to more urgent jobs this round", _names(g)))
            continue
        for p in g.pods:
            if placed[p.key]:
                left[placed[p.key]] -= p.gpus
        admits.append(Admit(g.job, placed))
    return admits, waits


def _names(g: Gang | Hold) -> tuple[str, ...]:
    return tuple(p.key for p in g.pods)


def decide(nodes_json: Sequence[Obj], pods_json: Sequence[Obj], ctx: Context) -> Decision:
    """The round (module docstring): malformed objects are skipped and named in `problems`."""
    nodes, pods, unsure, problems = _read(nodes_json, pods_json)
    free = free_gpus(nodes, pods, unsure)
    ready, holds = gangs(pods, ctx.namespace)
    admits, waits = _place(ready, free, {n.name: n for n in nodes}, ctx)
    waits += [Wait(h.job, h.reason, _names(h)) for h in holds]
    by_key = {p.key: p for p in pods}
    patches = []
    for a in admits:
        for key, node in sorted(a.nodes.items()):
            pod = by_key[key]
            patches.append(PodPatch(pod.namespace, pod.name, tuple(admit_ops(pod, node)), True))
    for w in waits:
        for pod in (by_key[k] for k in w.pods if by_key[k].namespace == ctx.namespace):
            ops = reason_ops(pod, w.reason)
            if ops:
                patches.append(PodPatch(pod.namespace, pod.name, tuple(ops), False))
    return Decision(tuple(admits), tuple(waits), tuple(patches), tuple(problems), free)
