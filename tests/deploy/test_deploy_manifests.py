"""deploy/k8s: every manifest parses, renders, passes a schema check and the house security rules."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_support import (CLUSTER_SCOPED, DEPLOY, K8S, POD_OWNERS, bound_service_accounts, build, containers, key,
                            load_all, pod_spec)

TARGETS = ["base", "overlays/example"]
COMPONENTS = sorted(p.name for p in (K8S / "components").iterdir() if p.is_dir())
# Kubernetes version the schemas are checked against (the oldest we support:
# grpc probes are GA since 1.27, internalTrafficPolicy since 1.26).
K8S_VERSION = "1.29.0"
# Secrets created outside kustomize on purpose (see components/tls).
EXTERNAL_SECRETS = {"gpufair-tls"}


def _with_all_components() -> list[dict[str, Any]]:
    """The example overlay plus every optional component, built from a scratch kustomization."""
    return build_extra(COMPONENTS)


def build_extra(components: list[str]) -> list[dict[str, Any]]:
    """Base plus `components`, from a throw-away kustomization beside base (relative paths)."""
    import tempfile

    with tempfile.TemporaryDirectory(dir=K8S) as d:
        kdir = Path(d)
        comps = "".join(f"  - ../components/{c}\n" for c in components)
        (kdir / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
            f"resources:\n  - ../base\ncomponents:\n{comps}")
        return build(kdir)


@pytest.fixture(scope="module", params=TARGETS)
def rendered(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return build(K8S / request.param)


@pytest.fixture(scope="module")
def overlay() -> list[dict[str, Any]]:
    return build(K8S / "overlays/example")


def test_every_yaml_file_under_deploy_parses() -> None:
    files = sorted(DEPLOY.rglob("*.yaml")) + sorted(DEPLOY.rglob("*.yml"))
    assert len(files) >= 10
    for path in files:
        docs = load_all(path)
        assert docs, f"{path} is empty"
        assert all(isinstance(d, dict) for d in docs), f"{path}: a document is not a mapping"


def test_kustomizations_render_and_patches_hit_existing_objects(rendered: list[dict[str, Any]]) -> None:
    keys = [key(o) for o in rendered]
    assert len(keys) == len(set(keys)), "duplicate objects"
    for o in rendered:
        assert o.get("apiVersion") and o.get("kind") and o["metadata"].get("name"), o
        if o["kind"] not in CLUSTER_SCOPED:
            assert o["metadata"]["namespace"] == "gpufair"


def test_every_component_renders_over_the_base() -> None:
    objs = _with_all_components()
    assert ("ServiceMonitor", "gpufair") in {key(o) for o in objs}


def _normalise(value: Any) -> Any:
    """kustomize prepends patched list items; order of named items carries no meaning."""
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        items = [_normalise(v) for v in value]
        if items and all(isinstance(i, dict) and "name" in i for i in items):
            items.sort(key=lambda i: i["name"])
        return items
    return value


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed: the built-in resolver alone is used")
@pytest.mark.parametrize("target", TARGETS)
def test_resolver_agrees_with_kubectl_kustomize(target: str) -> None:
    out = subprocess.run(["kubectl", "kustomize", str(K8S / target)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    theirs = {key(o): _normalise(o) for o in yaml.safe_load_all(out.stdout) if o}
    mine = {key(o): _normalise(o) for o in build(K8S / target)}
    assert mine == theirs


def test_manifests_pass_the_kubernetes_schema(rendered: list[dict[str, Any]]) -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed (requirements-dev.txt)")
    for o in rendered:
        try:
            kv.validate(o, K8S_VERSION, strict=True)
        except kv.ValidationError as exc:
            pytest.fail(f"{key(o)}: {exc}")


def test_servicemonitor_is_well_formed() -> None:
    (sm,) = [o for o in _with_all_components() if o["kind"] == "ServiceMonitor"]
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    services = [o for o in _with_all_components() if o["kind"] == "Service"]
    selected = [s for s in services if s["metadata"]["labels"].get("app.kubernetes.io/component") in
                sm["spec"]["selector"]["matchExpressions"][0]["values"]]
    assert len(selected) == 3
    for ep in sm["spec"]["endpoints"]:
        assert all(ep["port"] in {p["name"] for p in s["spec"]["ports"]} for s in selected)


def test_containers_are_non_root_read_only_and_bounded(rendered: list[dict[str, Any]]) -> None:
    bound = bound_service_accounts(rendered)
    for o in rendered:
        spec = pod_spec(o)
        if spec is None:
            continue
        # An API token only where a role is bound (the scheduler, with components/admission).
        assert spec["automountServiceAccountToken"] is (spec["serviceAccountName"] in bound), key(o)
        psc = spec["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["seccompProfile"]["type"] == "RuntimeDefault", key(o)
        assert any(v["name"] == "tmp" and "emptyDir" in v for v in spec["volumes"]), f"{key(o)}: no emptyDir /tmp"
        for c in containers(o):
            where = f"{key(o)} container {c['name']}"
            assert c.get("image"), where
            assert {"cpu", "memory"} <= set(c["resources"]["requests"]) and {"cpu", "memory"} <= set(c["resources"]["limits"]), where
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True, where
            assert sc["capabilities"]["drop"] == ["ALL"], where
            if sc.get("runAsUser") == 0 or sc.get("runAsNonRoot") is False:
                # The one root step: chown of the cache's hostPath, keeping CHOWN alone.
                assert (o["kind"], c["name"]) == ("DaemonSet", "own-cache-dir"), where
                assert sc["capabilities"]["add"] == ["CHOWN"], where
            else:
                assert not sc["capabilities"].get("add"), where


def test_long_running_containers_have_probes(rendered: list[dict[str, Any]]) -> None:
    for o in rendered:
        if o["kind"] not in {"Deployment", "StatefulSet", "DaemonSet"}:
            continue
        for c in containers(o, init=False):
            assert c.get("readinessProbe") and c.get("livenessProbe"), f"{key(o)} {c['name']}"


def test_references_resolve(overlay: list[dict[str, Any]]) -> None:
    names = {(o["kind"], o["metadata"]["name"]) for o in overlay}
    data = {key(o): {**o.get("data", {}), **o.get("stringData", {})} for o in overlay if o["kind"] in {"ConfigMap", "Secret"}}
    for o in overlay:
        spec = pod_spec(o)
        if spec is None:
            continue
        assert ("ServiceAccount", spec["serviceAccountName"]) in names, key(o)
        volumes = {v["name"]: v for v in spec["volumes"]}
        volumes.update({t["metadata"]["name"]: t for t in o["spec"].get("volumeClaimTemplates", [])})
        for c in containers(o):
            for m in c.get("volumeMounts", []):
                assert m["name"] in volumes, f"{key(o)}: mount of undefined volume {m['name']}"
            for src in c.get("envFrom", []):
                assert ("ConfigMap", src["configMapRef"]["name"]) in names
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ("Secret", ref["name"]) in names, f"{key(o)}: secret {ref['name']}"
                    assert ref["key"] in data[("Secret", ref["name"])], f"{key(o)}: {ref}"
                ref = e.get("valueFrom", {}).get("configMapKeyRef")
                if ref:
                    assert ref["key"] in data[("ConfigMap", ref["name"])], f"{key(o)}: {ref}"
        for v in spec["volumes"]:
            if "secret" in v and v["secret"]["secretName"] not in EXTERNAL_SECRETS:
                assert ("Secret", v["secret"]["secretName"]) in names, f"{key(o)}: secret {v['secret']['secretName']}"
            if "configMap" in v:
                assert ("ConfigMap", v["configMap"]["name"]) in names, f"{key(o)}: configMap {v['configMap']['name']}"


def test_services_select_pods_and_name_their_ports(rendered: list[dict[str, Any]]) -> None:
    pods = [(o, o["spec"]["template"]["metadata"]["labels"]) for o in rendered if o["kind"] in POD_OWNERS]
    for svc in (o for o in rendered if o["kind"] == "Service"):
        selector = svc["spec"]["selector"]
        if "job-name" in selector:  # set by the Job controller on its pods
            targets = [o for o, _ in pods if o["kind"] == "Job" and o["metadata"]["name"] == selector["job-name"]]
        else:
            targets = [o for o, labels in pods if selector.items() <= labels.items()]
        assert targets, f"Service {svc['metadata']['name']} selects no pods"
        for p in svc["spec"]["ports"]:
            target = p.get("targetPort", p["port"])
            ports = [cp for o in targets for c in containers(o, init=False) for cp in c.get("ports", [])]
            assert any(cp.get("name") == target or cp["containerPort"] == target for cp in ports), \
                f"Service {svc['metadata']['name']} port {p['name']}"


def test_the_base_grants_no_rbac_and_no_service_account_mounts_a_token() -> None:
    # RBAC comes only with components/admission (tests/deploy/test_deploy_admission.py).
    objs = build(K8S / "base")
    assert not {o["kind"] for o in objs} & {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}


def test_service_accounts_never_mount_a_token_by_default(rendered: list[dict[str, Any]]) -> None:
    for sa in (o for o in rendered if o["kind"] == "ServiceAccount"):
        assert sa["automountServiceAccountToken"] is False


def test_network_policies_default_deny_and_guard_etcd(rendered: list[dict[str, Any]]) -> None:
    pols = {o["metadata"]["name"]: o["spec"] for o in rendered if o["kind"] == "NetworkPolicy"}
    assert pols["default-deny-ingress"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    etcd_clients = {o["metadata"]["name"] for o in rendered if o["kind"] in POD_OWNERS
                    and o["spec"]["template"]["metadata"]["labels"].get("gpufair.io/etcd-client") == "true"}
    assert etcd_clients == {"gpufair-scheduler", "gpufair-cache", "etcd-auth-init"}
    grpc_ports = {p["port"] for rule in pols["gpufair-grpc"]["ingress"] for p in rule["ports"]}
    assert grpc_ports == {50051, 50052, 50053}


def test_overlay_sets_images_replicas_capacity_and_tls(overlay: list[dict[str, Any]]) -> None:
    objs = {key(o): o for o in overlay}
    images = {c["image"] for o in overlay for c in containers(o)}
    assert not any(i.startswith("gpufair") for i in images), images
    assert objs[("Deployment", "gpufair-scheduler")]["spec"]["replicas"] == 3
    cache = next(containers(objs[("DaemonSet", "gpufair-cache")], init=False))
    env = {e["name"]: e.get("value") for e in cache["env"]}
    assert env["GPUFAIR_CACHE_CAPACITY"] == "400GiB"
    for k in [("Deployment", "gpufair-metrics"), ("Deployment", "gpufair-scheduler"), ("DaemonSet", "gpufair-cache")]:
        c = next(containers(objs[k], init=False))
        env = {e["name"] for e in c["env"]}
        assert {"GPUFAIR_TLS_CERT", "GPUFAIR_TLS_KEY", "GPUFAIR_TLS_CA"} <= env, k
        probe = c["readinessProbe"]
        assert "grpc" not in probe and "health_probe.py" in " ".join(probe["exec"]["command"]), k
