"""Invariants of the admission round on generated clusters: whatever the nodes,
taints, selectors and gangs, a round never raises, admits a gang whole or
not at all, never hands out more GPUs than a node has free, only to nodes
the pods may use, accounts for every gated pod, and its patches are ones
the API server accepts on a gated pod; applied, they leave nothing to redo."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufair.scheduler.k8s.fit import fits
from gpufair.scheduler.k8s.objects import parse_node, parse_pod
from k8s_support import by_name, check_gated_pod_update, gated_pod, gates, patched, recorded, run

BASE_NODE = by_name(recorded("nodes"), "gpu-a")
BOUND_POD = by_name(recorded("pods"), "llm-ft-7d9c6b5f4-2kq8h")


@st.composite
def clusters(draw):
    nodes, pods = [], []
    for i in range(draw(st.integers(1, 5))):
        n = copy.deepcopy(BASE_NODE)
        n["metadata"]["name"] = f"n{i}"
        n["metadata"]["labels"]["topology.kubernetes.io/zone"] = draw(st.sampled_from(["a", "b"]))
        gpus = draw(st.integers(0, 8))
        n["status"]["allocatable"]["nvidia.com/gpu"] = str(gpus)
        if draw(st.booleans()) and draw(st.booleans()):
            n["spec"]["unschedulable"] = True
        if not draw(st.booleans()):
            n["spec"].pop("taints")
        nodes.append(n)
        for k in range(draw(st.integers(0, 2))):  # pods already running there
            p = copy.deepcopy(BOUND_POD)
            p["metadata"]["name"] = f"run-{i}-{k}"
            p["spec"]["nodeName"] = f"n{i}"
            p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = str(draw(st.integers(0, 3)))
            pods.append(p)
    for j in range(draw(st.integers(1, 5))):
        count = draw(st.integers(1, 3))
        size = count + draw(st.sampled_from([0, 0, 0, 1]))  # sometimes a pod is still missing
        minute = draw(st.integers(0, 19))
        zone = draw(st.sampled_from([None, "a", "b"]))
        tolerant = draw(st.booleans()) or draw(st.booleans())
        for i in range(count):
            p = gated_pod(f"job{j}", i, gpus=draw(st.integers(0, 4)), size=size,
                          created=f"2025-03-04T09:{minute:02d}:00Z")
            if zone:
                p["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": zone}
            if not tolerant:
                p["spec"]["tolerations"] = p["spec"]["tolerations"][1:]
            pods.append(p)
    return nodes, pods, {f"job{draw(st.integers(0, 4))}": frozenset({"n0"})}


def _dataset_cached(pods, cached_jobs):
    # Give the jobs named in `cached_jobs` a dataset that n0's cache holds.
    for p in pods:
        if p["metadata"].get("labels", {}).get("gpufair.io/job") in cached_jobs:
            p["metadata"]["annotations"]["gpufair.io/dataset"] = "s3://data/set/"
    return {"s3://data/set/": frozenset({"n0"})}


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_a_round_keeps_every_invariant(cluster) -> None:
    nodes, pods, cached_jobs = cluster
    cached = _dataset_cached(pods, cached_jobs)
    d = run(nodes, pods, cached=cached)
    views = {p["metadata"]["name"]: parse_pod(p) for p in pods}
    node_views = {n["metadata"]["name"]: parse_node(n) for n in nodes}
    gated = {name for name, v in views.items() if "gpufair.io/admission" in v.gates}
    by_job: dict[str, set[str]] = {}
    for name in gated:
        by_job.setdefault(views[name].labels["gpufair.io/job"], set()).add(name)

    placed: dict[str, str] = {}
    for a in d.admitted:
        names = {k.split("/", 1)[1] for k in a.nodes}
        assert names == by_job[a.job], "a gang admitted in part"
        placed.update({k.split("/", 1)[1]: n for k, n in a.nodes.items()})
    waiting = {k.split("/", 1)[1] for w in d.waiting for k in w.pods}
    assert waiting | set(placed) == gated and not waiting & set(placed), "a gated pod unaccounted for"

    used: dict[str, int] = {}
    for name, node in placed.items():
        if views[name].gpus:
            assert node in d.free and fits(views[name], node_views[node]), f"{name} on a node it may not use"
            used[node] = used.get(node, 0) + views[name].gpus
        else:
            assert node == ""
    assert all(used[n] <= d.free[n] for n in used), "a node over-committed"

    _apply(pods, d, placed)
    again = run(nodes, pods, cached=cached)
    assert {n: again.free[n] for n in used} == {n: d.free[n] - used[n] for n in used}
    # Rounds converge: admitted pods are never touched again, and once nothing
    # more is admitted the reasons written are the ones the next round finds.
    for _ in range(len(by_job) + 1):
        assert not {p.name for p in again.patches} & set(placed), "an admitted pod patched again"
        assert not {a.job for a in again.admitted} & {a.job for a in d.admitted}
        if not again.patches:
            return
        d = again
        _apply(pods, d, {k.split("/", 1)[1]: n for a in d.admitted for k, n in a.nodes.items()})
        placed.update({k.split("/", 1)[1]: n for a in d.admitted for k, n in a.nodes.items()})
        again = run(nodes, pods, cached=cached)
    raise AssertionError(f"rounds did not settle: {again.patches}")


def _apply(pods, d, placed) -> None:
    """Send the round's patches as the API server would take them."""
    for patch in d.patches:
        pod = by_name(pods, patch.name)
        after = patched(pod, patch.ops)
        check_gated_pod_update(pod, after)
        if patch.admits:
            assert "gpufair.io/admission" not in gates(after)
            assert parse_pod(after).pinned_node == placed[patch.name]
        pod.clear()
        pod.update(after)


def test_the_generator_reaches_admissions_and_holds() -> None:
    # Guard against a generator that only ever makes clusters where nothing happens.
    seen = {"admitted": 0, "waiting": 0}

    @settings(max_examples=60, deadline=None)
    @given(clusters())
    def probe(cluster) -> None:
        nodes, pods, _ = cluster
        d = run(nodes, pods)
        seen["admitted"] += bool(d.admitted)
        seen["waiting"] += bool(d.waiting)

    probe()
    assert seen["admitted"] >= 5 and seen["waiting"] >= 5, seen



def _paths(value, prefix=()):
    """Every path into a JSON value."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


JUNK = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=4),
                 st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
PODS, NODES = recorded("pods"), recorded("nodes")


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["pods", "nodes"]), st.data())
def test_any_field_of_any_object_replaced_by_junk_is_skipped_or_read_never_a_crash(kind, data) -> None:
    objs = copy.deepcopy(PODS if kind == "pods" else NODES)
    i = data.draw(st.integers(0, len(objs) - 1))
    path = data.draw(st.sampled_from(list(_paths(objs[i]))))
    junk = data.draw(JUNK)
    if not path:
        objs[i] = junk
    else:
        parent = objs[i]
        for step in path[:-1]:
            parent = parent[step]
        parent[path[-1]] = junk
    d = run(NODES if kind == "pods" else objs, objs if kind == "pods" else PODS)
    assert all(p.startswith("skipped: ") for p in d.problems)
