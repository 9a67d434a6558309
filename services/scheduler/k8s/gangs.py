"""From gated pods to gpufair jobs: which pods form one job (a gang), whether
all of them exist yet, and what the queue knows of the job (pure).

A gang is the pods in the managed namespace that carry gpufair's scheduling
gate and the same `gpufair.io/job` label. It is admitted as a whole, and only
once the job's pods exist: gated ones plus those already admitted and not
finished (a replacement for a failed rank joins its running job) must reach
the `gpufair.io/pods` annotation. Everything a job author writes is checked
here; a pod or job that cannot be admitted as written is held with a reason
that says what to fix, and stays gated.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpufair.common.errors import GpufairError
from gpufair.common.keys import check_segment
from gpufair.common.steptime import StepTimeModel
from gpufair.common.uris import parse_dataset_uri
from gpufair.scheduler.k8s.objects import (BATCH_ANNOTATION, DATASET_ANNOTATION, GATE, JOB_LABEL, MODEL_ANNOTATION,
                                           PODS_ANNOTATION, SAMPLES_ANNOTATION, PodView)
from gpufair.scheduler.policy.fleet import UNKNOWN_ALONE_S, FleetJob


@dataclass(frozen=True)
class Gang:
    """The gated pods of one job, and what its annotations say."""

    job: str
    pods: tuple[PodView, ...]  # gated by gpufair, by name
    size: int  # gpufair.io/pods
    live: int  # the job's other pods, admitted and not finished
    global_batch: int | None = None
    samples: int | None = None
    model: str = ""
    dataset: str = ""  # canonical URI

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.pods)

    @property
    def arrival_s(self) -> float:
        return min(p.created_s for p in self.pods)


@dataclass(frozen=True)
class Hold:
    """Gated pods that stay gated, and why (empty `job`: the pod has no job label)."""

    job: str
    reason: str
    pods: tuple[PodView, ...]


class _Held(Exception):
    """This job cannot be admitted as written (the message says why)."""


def _positive(annotations: Mapping[str, str], name: str) -> int | None:
    raw = annotations.get(name)
    if raw is None:
        return None
    if not raw.strip().isdigit() or int(raw) < 1:
        raise _Held(f"annotation {name}={raw!r} is not a positive whole number")
    return int(raw)


def _same(pods: Sequence[PodView], name: str) -> str | None:
    values = {p.annotations.get(name) for p in pods}
    if len(values) > 1:
        raise _Held(f"its pods disagree on annotation {name}: {sorted(map(str, values))}")
    return values.pop()


def _gang(job: str, gated: list[PodView], others: list[PodView]) -> Gang:
    try:
        check_segment("job id", job)
    except ValueError as exc:
        raise _Held(f"label {JOB_LABEL}: {exc}") from None
    owners = {p.owner_uid for p in gated + others if p.owner_uid}
    if len(owners) > 1:
        raise _Held(f"pods of {len(owners)} different owners share {JOB_LABEL}={job}: give each Job its own id")
    for name in (PODS_ANNOTATION, BATCH_ANNOTATION, SAMPLES_ANNOTATION, MODEL_ANNOTATION, DATASET_ANNOTATION):
        _same(gated, name)
    notes = gated[0].annotations
    size = _positive(notes, PODS_ANNOTATION)
    if size is None:
        raise _Held(f"no annotation {PODS_ANNOTATION}: the number of pods to admit together is unknown")
    dataset = notes.get(DATASET_ANNOTATION, "")
    if dataset:
        try:
            dataset = parse_dataset_uri(dataset).canonical
        except GpufairError as exc:
            raise _Held(f"annotation {DATASET_ANNOTATION}: {exc}") from None
    gang = Gang(job, tuple(sorted(gated, key=lambda p: p.name)), size,
                sum(1 for p in others if not p.deleting), _positive(notes, BATCH_ANNOTATION),
                _positive(notes, SAMPLES_ANNOTATION), notes.get(MODEL_ANNOTATION, ""), dataset)
    if gang.global_batch is not None and gang.global_batch < gang.gpus:
        raise _Held(f"annotation {BATCH_ANNOTATION}={gang.global_batch} is smaller than its {gang.gpus} GPUs")
    if len(gang.pods) + gang.live < size:
        raise _Held(f"waiting for its pods: {len(gang.pods) + gang.live} of {size} exist")
    return gang


def gangs(pods: Sequence[PodView], namespace: str) -> tuple[list[Gang], list[Hold]]:
    """The gangs ready to be placed, and the gated pods held back (module docstring)."""
    gated: dict[str, list[PodView]] = defaultdict(list)
    others: dict[str, list[PodView]] = defaultdict(list)
    holds: list[Hold] = []
    for p in pods:
        mine = GATE in p.gates and not p.terminal
        if mine and p.namespace != namespace:
            holds.append(Hold(p.labels.get(JOB_LABEL, ""), f"namespace {p.namespace} is not the one gpufair "
                                                           f"admits ({namespace})", (p,)))
        elif mine and not p.labels.get(JOB_LABEL):
            holds.append(Hold("", f"gated by {GATE} but has no {JOB_LABEL} label", (p,)))
        elif mine:
            gated[p.labels[JOB_LABEL]].append(p)
        elif p.namespace == namespace and p.labels.get(JOB_LABEL) and not p.terminal:
            others[p.labels[JOB_LABEL]].append(p)
    ready: list[Gang] = []
    for job in sorted(gated):
        try:
            ready.append(_gang(job, gated[job], others[job]))
        except _Held as why:
            holds.append(Hold(job, str(why), tuple(gated[job])))
    return ready, holds


def fleet_job(gang: Gang, profile: StepTimeModel | None, cached_nodes: frozenset[str]) -> FleetJob:
    """The gang as the round planner sees it: a waiting job. With a step-time
    profile of its model its exclusive speed is the profile's on its GPU
    count at the even split (synchronisation included); its length needs
    that speed and `gpufair.io/samples`, else it is `UNKNOWN_ALONE_S`."""
    n = gang.gpus
    batch = gang.global_batch or n
    if profile is not None and profile.c_s > 0:
        per_step, per_sample = profile.costs(n)
        rate = batch / profile.step_s(batch / n, n)
    else:  # unknown speed: one step a second; only the order among such jobs matters
        rate, per_sample, per_step = float(batch), n / batch, 0.0
    known = gang.samples is not None and profile is not None and profile.c_s > 0
    total = float(gang.samples) if known else rate * UNKNOWN_ALONE_S  # type: ignore[arg-type]
    return FleetJob(job=gang.job, num_gpus=n, global_batch=batch, arrival_s=gang.arrival_s,
                    samples_total=total, exclusive_rate=rate, sec_per_sample=per_sample, sec_per_step=per_step,
                    model=gang.model, cached_nodes=cached_nodes, length_known=known)
