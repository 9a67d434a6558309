"""The Kubernetes rules the core re-implements, one by one: reading a GPU count,
tolerations, node selector terms, which pods are pinned, and how an
affinity is narrowed without replacing what the author wrote."""

from __future__ import annotations

import copy

import pytest

from gpufair.scheduler.k8s.fit import term_matches, tolerates, unfit_reason
from gpufair.scheduler.k8s.objects import NodeView, ObjectError, Taint, parse_node, parse_pod, whole_count
from gpufair.scheduler.k8s.patch import pin_ops, pointer
from k8s_support import by_name, patched, recorded

NODE = NodeView("gpu-a", 4, {"zone": "a", "gen": "3"})
REQ = {"key": "metadata.name", "operator": "In", "values": ["gpu-a"]}


@pytest.mark.parametrize("raw, count", [("2", 2), (2, 2), ("0", 0), ("2000m", 2), (" 8 ", 8)])
def test_gpu_counts_are_whole_numbers(raw, count) -> None:
    assert whole_count(raw, "x") == count


@pytest.mark.parametrize("raw", ["1.5", "1500m", "-1", -1, True, None, "", "2Gi", [2]])
def test_anything_else_is_refused_by_name(raw) -> None:
    with pytest.raises(ObjectError, match=r"^x is .*, not a whole number$"):
        whole_count(raw, "x")


def test_a_pod_holds_its_containers_sum_or_its_largest_init_container() -> None:
    pod = copy.deepcopy(by_name(recorded("pods"), "resnet-a-0-x7k2p"))
    trainer = pod["spec"]["containers"][0]
    pod["spec"]["containers"].append({**copy.deepcopy(trainer), "name": "sidecar"})
    assert parse_pod(pod).gpus == 2
    pod["spec"]["initContainers"] = [{"name": "warmup", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "3"}}}]
    assert parse_pod(pod).gpus == 3
    del trainer["resources"]["requests"]["nvidia.com/gpu"]  # limits alone: requests default to them
    assert parse_pod(pod).gpus == 3


def test_recorded_nodes_read_as_kubernetes_describes_them() -> None:
    nodes = {n.name: n for n in map(parse_node, recorded("nodes"))}
    assert {k: (n.gpus, n.usable) for k, n in nodes.items()} == {
        "gpu-a": (4, True), "gpu-b": (8, True), "gpu-c": (8, False), "gpu-d": (8, False), "cpu-1": (0, True)}
    assert Taint("nvidia.com/gpu", "present", "NoSchedule") in nodes["gpu-a"].taints


TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")


@pytest.mark.parametrize("toleration, ok", [
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, True),
    ({"key": "nvidia.com/gpu", "operator": "Exists"}, True),  # any effect
    ({"operator": "Exists"}, True),  # an empty key with Exists tolerates everything
    ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}, True),
    ({"key": "nvidia.com/gpu", "value": "present"}, True),  # Equal is the default operator
    ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent"}, False),
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, False),
    ({"key": "other", "operator": "Exists"}, False),
])
def test_tolerations_match_as_in_kubernetes(toleration, ok) -> None:
    assert tolerates([toleration], TAINT) is ok


@pytest.mark.parametrize("req, ok", [
    ({"key": "zone", "operator": "In", "values": ["a", "b"]}, True),
    ({"key": "zone", "operator": "In", "values": ["b"]}, False),
    ({"key": "zone", "operator": "NotIn", "values": ["b"]}, True),
    ({"key": "missing", "operator": "NotIn", "values": ["b"]}, True),
    ({"key": "zone", "operator": "Exists"}, True),
    ({"key": "missing", "operator": "Exists"}, False),
    ({"key": "missing", "operator": "DoesNotExist"}, True),
    ({"key": "gen", "operator": "Gt", "values": ["2"]}, True),
    ({"key": "gen", "operator": "Lt", "values": ["3"]}, False),
    ({"key": "zone", "operator": "Gt", "values": ["2"]}, False),  # not a number
    ({"key": "zone", "operator": "Like", "values": ["a"]}, False),  # no such operator
])
def test_match_expressions_follow_kubernetes_operators(req, ok) -> None:
    assert term_matches({"matchExpressions": [req]}, NODE) is ok


def test_terms_and_fields() -> None:
    assert not term_matches({}, NODE)  # an empty term matches nothing
    assert term_matches({"matchFields": [REQ]}, NODE)
    assert not term_matches({"matchFields": [{**REQ, "values": ["gpu-b"]}]}, NODE)
    assert not term_matches({"matchFields": [{**REQ, "key": "metadata.uid"}]}, NODE)
    both = {"matchFields": [REQ], "matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
    assert not term_matches(both, NODE)  # requirements of a term are ANDed


def test_unfit_reasons_name_the_rule() -> None:
    pod = parse_pod(by_name(recorded("pods"), "resnet-a-0-x7k2p"))
    nodes = {n.name: n for n in map(parse_node, recorded("nodes"))}
    assert unfit_reason(pod, nodes["gpu-a"]) == ""
    assert unfit_reason(pod, nodes["gpu-c"]) == "cordoned"
    assert unfit_reason(pod, nodes["gpu-d"]) == "not Ready"
    bare = parse_pod(by_name(recorded("pods"), "web-6b7d8c9f5-abcde"))
    assert unfit_reason(bare, nodes["gpu-a"]) == "taint nvidia.com/gpu=present:NoSchedule not tolerated"


def test_a_pod_is_pinned_only_when_every_term_names_the_same_single_node() -> None:
    raw = copy.deepcopy(by_name(recorded("pods"), "resnet-a-0-x7k2p"))
    affinity = raw["spec"].setdefault("affinity", {})
    terms = affinity.setdefault("nodeAffinity", {}).setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms["nodeSelectorTerms"] = [{"matchFields": [REQ]}]
    assert parse_pod(raw).pinned_node == "gpu-a"
    terms["nodeSelectorTerms"].append({"matchFields": [{**REQ, "values": ["gpu-b"]}]})
    assert parse_pod(raw).pinned_node == ""
    terms["nodeSelectorTerms"] = [{"matchFields": [{**REQ, "values": ["gpu-a", "gpu-b"]}]}]
    assert parse_pod(raw).pinned_node == ""


def test_pointer_escapes_slashes_and_tildes() -> None:
    assert pointer("metadata", "annotations", "gpufair.io/reason") == "/metadata/annotations/gpufair.io~1reason"
    assert pointer("a~b", 0) == "/a~0b/0"


_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PINNED = {"nodeSelectorTerms": [{"matchFields": [REQ]}]}
_ZONE = {"key": "zone", "operator": "In", "values": ["a"]}
_PREFERRED = [{"weight": 1, "preference": {"matchExpressions": [_ZONE]}}]


@pytest.mark.parametrize("before, after", [
    ({}, {"nodeAffinity": {_REQUIRED: _PINNED}}),
    ({"podAntiAffinity": {"x": 1}}, {"podAntiAffinity": {"x": 1}, "nodeAffinity": {_REQUIRED: _PINNED}}),
    ({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": _PREFERRED}},
     {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": _PREFERRED, _REQUIRED: _PINNED}}),
    ({"nodeAffinity": {_REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [_ZONE]},
                                                         {"matchFields": [{**REQ, "operator": "NotIn"}]}]}}},
     {"nodeAffinity": {_REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [_ZONE], "matchFields": [REQ]},
                                                         {"matchFields": [{**REQ, "operator": "NotIn"}, REQ]}]}}}),
])
def test_pin_ops_narrow_the_affinity_and_keep_the_authors_parts(before, after) -> None:
    pod = {"spec": {"affinity": copy.deepcopy(before)}} if before else {"spec": {}}
    assert patched(pod, pin_ops(before, "gpu-a"))["spec"]["affinity"] == after
