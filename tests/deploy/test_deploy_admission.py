"""deploy/k8s/components/admission agrees with the code: the scheduler is
granted exactly the Kubernetes calls its adapter makes (`CALLS`), no more
and no less, and nobody else is granted anything; admission is switched on
exactly where that RBAC is; and the example Job, as the Job controller would
create its pods, is one the controller admits on the recorded cluster."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from deploy_support import K8S, REPO, bound_service_accounts, build, containers, key, pod_spec
from gpufair.scheduler.k8s.admit import Context, decide
from gpufair.scheduler.k8s.api import CALLS
from gpufair.scheduler.k8s.objects import GATE, JOB_LABEL, PODS_ANNOTATION, BATCH_ANNOTATION

Obj = dict[str, Any]
WITH_ADMISSION = ["overlays/example", "components/admission"]


def _render(target: str) -> list[Obj]:
    if target.startswith("components/"):
        from test_deploy_manifests import build_extra

        return build_extra([target.split("/", 1)[1]])
    return build(K8S / target)


@pytest.fixture(scope="module", params=WITH_ADMISSION)
def objs(request: pytest.FixtureRequest) -> list[Obj]:
    return _render(request.param)


def granted(objs: list[Obj]) -> dict[str, set[tuple[str, str, str, bool]]]:
    """ServiceAccount -> {(verb, resource, API group, namespaced)} its bindings grant.
    A RoleBinding grants in its namespace (also when it names a ClusterRole)."""
    roles = {(o["kind"], o["metadata"]["name"]): o for o in objs if o["kind"] in ("Role", "ClusterRole")}
    out: dict[str, set[tuple[str, str, str, bool]]] = {}
    for b in (o for o in objs if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        role = roles[(b["roleRef"]["kind"], b["roleRef"]["name"])]  # a dangling roleRef fails here
        for rule in role["rules"]:
            assert set(rule) <= {"apiGroups", "resources", "verbs"}, f"{key(role)}: {rule} (resourceNames?)"
            for s in b["subjects"]:
                assert s["kind"] == "ServiceAccount", s
                out.setdefault(s["name"], set()).update(
                    (verb, res, group, b["kind"] == "RoleBinding")
                    for verb in rule["verbs"] for res in rule["resources"] for group in rule["apiGroups"])
    return out


def _scheduler(objs: list[Obj]) -> Obj:
    (dep,) = [o for o in objs if key(o) == ("Deployment", "gpufair-scheduler")]
    return dep


def _env(container: Obj) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_the_scheduler_is_granted_exactly_the_calls_of_its_adapter(objs: list[Obj]) -> None:
    calls = {(c.verb, c.resource, "", c.namespaced) for c in CALLS}
    grants = granted(objs)
    assert grants.get("gpufair-scheduler", set()) - calls == set(), "granted but never called"
    assert calls - grants.get("gpufair-scheduler", set()) == set(), "called but not granted"
    assert set(grants) == {"gpufair-scheduler"}, "another ServiceAccount is granted something"


def test_every_role_is_bound_and_every_binding_names_a_real_service_account(objs: list[Obj]) -> None:
    refs = {(b["roleRef"]["kind"], b["roleRef"]["name"]) for b in objs if b["kind"].endswith("Binding")}
    assert refs == {key(o) for o in objs if o["kind"] in ("Role", "ClusterRole")}
    accounts = {o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"}
    assert bound_service_accounts(objs) <= accounts


def test_admission_is_on_exactly_where_its_rbac_is(objs: list[Obj]) -> None:
    dep = _scheduler(objs)
    env = _env(next(containers(dep, init=False)))
    assert env["GPUFAIR_K8S"] == "true"
    # The namespace it admits is its own, where the Role that lets it patch pods is bound.
    assert env["GPUFAIR_K8S_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert pod_spec(dep)["automountServiceAccountToken"] is True
    base = _scheduler(build(K8S / "base"))
    assert "GPUFAIR_K8S" not in _env(next(containers(base, init=False)))
    assert pod_spec(base)["automountServiceAccountToken"] is False


def test_the_role_is_bound_in_the_namespace_the_scheduler_runs_in() -> None:
    objs = build(K8S / "overlays/example")
    (binding,) = [o for o in objs if o["kind"] == "RoleBinding"]
    (role,) = [o for o in objs if o["kind"] == "Role"]
    namespace = _scheduler(objs)["metadata"]["namespace"]
    assert binding["metadata"]["namespace"] == role["metadata"]["namespace"] == namespace
    assert {s["namespace"] for o in objs if o["kind"].endswith("Binding") for s in o["subjects"]} == {namespace}


def _sample_job(objs: list[Obj]) -> Obj:
    (job,) = [o for o in objs if key(o) == ("Job", "gpufair-sample")]
    return job


def _arg(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_the_example_job_is_gated_and_labelled_as_its_trainer_registers(objs: list[Obj]) -> None:
    job = _sample_job(objs)
    template = job["spec"]["template"]
    argv = next(containers(job, init=False))["args"]
    assert [g["name"] for g in template["spec"]["schedulingGates"]] == [GATE]
    assert template["metadata"]["labels"][JOB_LABEL] == _arg(argv, "--job")  # the id it registers under
    notes = template["metadata"]["annotations"]
    assert int(notes[PODS_ANNOTATION]) == job["spec"]["parallelism"] == job["spec"]["completions"]
    assert notes[BATCH_ANNOTATION] == _arg(argv, "--global-batch")


def _pods_of(job: Obj) -> list[Obj]:
    """The pods the Job controller would create from the template (Indexed, all at once)."""
    pods = []
    for i in range(job["spec"]["parallelism"]):
        template = copy.deepcopy(job["spec"]["template"])
        meta = template["metadata"]
        meta.update(name=f"{job['metadata']['name']}-{i}-abcde", namespace=job["metadata"]["namespace"],
                    uid=f"pod-{i}", resourceVersion=str(1000 + i), creationTimestamp="2025-03-04T09:15:02Z",
                    ownerReferences=[{"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
                                      "uid": "job-uid", "controller": True}])
        meta["annotations"]["batch.kubernetes.io/job-completion-index"] = str(i)
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"],
                     "status": {"phase": "Pending"}})
    return pods


def test_the_controller_admits_the_example_job_on_the_recorded_cluster(objs: list[Obj]) -> None:
    nodes = json.loads((REPO / "tests/fixtures/k8s/nodes.json").read_text(encoding="utf-8"))["items"]
    pods = _pods_of(_sample_job(objs))
    d = decide(nodes, pods, Context(now=1741080000.0, namespace="gpufair"))
    (admitted,) = d.admitted
    assert len(set(admitted.nodes.values())) == 1 and "" not in admitted.nodes.values()
    assert {p.name for p in d.patches if p.admits} == {p["metadata"]["name"] for p in pods}
    # Without the GPU toleration the recorded GPU nodes (tainted) would refuse it.
    for p in pods:
        p["spec"]["tolerations"] = []
    assert not decide(nodes, pods, Context(now=1741080000.0, namespace="gpufair")).admitted


def test_deploy_readme_explains_the_path() -> None:
    text = (REPO / "deploy" / "README.md").read_text(encoding="utf-8")
    assert "## How a training Job reaches gpufair" in text
    for word in (GATE, JOB_LABEL, PODS_ANNOTATION, "components/admission", "1.30", "1.27"):
        assert word in text, word

