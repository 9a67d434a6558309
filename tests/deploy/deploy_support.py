"""Offline readers for deploy/: YAML loading and a small kustomize subset.

`build(dir)` renders a kustomization the way `kubectl kustomize` does for the
features deploy/k8s uses (resources, components, strategic-merge patches,
images, replicas, namespace, configMapGenerator from files without name
hashes) and refuses anything else, so a feature it does
not model can never be silently ignored. A patch that matches no object is an
error, which is how the tests prove every overlay patch applies.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
COMPOSE = DEPLOY / "compose" / "docker-compose.yaml"

Obj = dict[str, Any]
_SUPPORTED = {"apiVersion", "kind", "resources", "components", "patches", "images", "replicas", "namespace",
              "configMapGenerator", "generatorOptions"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "PersistentVolume"}
POD_OWNERS = {"Deployment", "StatefulSet", "DaemonSet", "Job"}


class KustomizeError(Exception):
    """A kustomization this resolver cannot render faithfully, or a broken one."""


def load_all(path: Path) -> list[Obj]:
    """Every non-empty YAML document in a file."""
    with path.open(encoding="utf-8") as fh:
        return [d for d in yaml.safe_load_all(fh) if d is not None]


def key(obj: Obj) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def merge(base: Any, patch: Any) -> Any:
    """Strategic merge: maps merge, null deletes, lists of named maps merge by name."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = merge(out[k], v) if k in out else copy.deepcopy(v)
        return out
    if _named_list(base) and _named_list(patch):
        out = list(base)
        index = {item["name"]: i for i, item in enumerate(out)}
        for item in patch:
            if item["name"] in index:
                out[index[item["name"]]] = merge(out[index[item["name"]]], item)
            else:
                out.append(copy.deepcopy(item))
        return out
    return copy.deepcopy(patch)


def _named_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(i, dict) and "name" in i for i in value)


def bound_service_accounts(objs: list[Obj]) -> set[str]:
    """ServiceAccounts some RoleBinding or ClusterRoleBinding grants a role to."""
    return {s["name"] for o in objs if o["kind"] in ("RoleBinding", "ClusterRoleBinding")
            for s in o.get("subjects", []) if s["kind"] == "ServiceAccount"}


def pod_spec(obj: Obj) -> Obj | None:
    """The pod template spec of a workload, else None."""
    if obj.get("kind") not in POD_OWNERS:
        return None
    return obj["spec"]["template"]["spec"]


def containers(obj: Obj, *, init: bool = True) -> Iterator[Obj]:
    spec = pod_spec(obj)
    if spec is None:
        return
    yield from spec.get("containers", [])
    if init:
        yield from spec.get("initContainers", [])


def _apply_patch(objs: list[Obj], patch: Obj, source: str) -> None:
    matches = [i for i, o in enumerate(objs) if key(o) == key(patch)]
    if len(matches) != 1:
        raise KustomizeError(f"{source}: patch for {key(patch)} matches {len(matches)} objects, not 1")
    objs[matches[0]] = merge(objs[matches[0]], patch)


def _set_image(image: str, rule: Obj) -> str:
    name = image.split("@")[0].rsplit(":", 1)[0] if ":" in image.split("/")[-1] else image.split("@")[0]
    if name != rule["name"]:
        return image
    return f"{rule.get('newName', name)}:{rule['newTag']}" if "newTag" in rule else rule.get("newName", name)


def _read_kustomization(directory: Path) -> Obj:
    path = directory / "kustomization.yaml"
    if not path.is_file():
        raise KustomizeError(f"{directory}: no kustomization.yaml")
    (k,) = load_all(path)
    unknown = set(k) - _SUPPORTED
    if unknown:
        raise KustomizeError(f"{path}: fields this resolver does not model: {sorted(unknown)}")
    return k


def _patches(directory: Path, k: Obj) -> Iterator[tuple[Obj, str]]:
    for p in k.get("patches", []):
        if set(p) != {"path"}:
            raise KustomizeError(f"{directory}: only `patches: - path:` is modelled, got {p}")
        path = directory / p["path"]
        for doc in load_all(path):
            yield doc, str(path)


def _generated_config_maps(directory: Path, k: Obj) -> list[Obj]:
    """ConfigMaps from `configMapGenerator` with `files:` only, names unhashed."""
    gens = k.get("configMapGenerator", [])
    options = k.get("generatorOptions", {})
    if gens and (options.get("disableNameSuffixHash") is not True or set(options) - {"disableNameSuffixHash", "labels"}):
        raise KustomizeError(f"{directory}: only generatorOptions disableNameSuffixHash: true (+ labels) is modelled")
    out = []
    for gen in gens:
        if set(gen) != {"name", "files"}:
            raise KustomizeError(f"{directory}: only configMapGenerator name + files is modelled, got {sorted(gen)}")
        data = {}
        for entry in gen["files"]:
            name, _, path = entry.rpartition("=") if "=" in entry else (Path(entry).name, "", entry)
            data[name] = (directory / path).read_text(encoding="utf-8")
        meta: Obj = {"name": gen["name"]}
        if options.get("labels"):
            meta["labels"] = dict(options["labels"])
        out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
    return out


def build(directory: Path) -> list[Obj]:
    """Render the kustomization in `directory` (see the module docstring)."""
    k = _read_kustomization(directory)
    objs: list[Obj] = []
    for res in k.get("resources", []):
        target = (directory / res).resolve()
        objs.extend(build(target) if target.is_dir() else load_all(target))
    objs.extend(_generated_config_maps(directory, k))
    for comp in k.get("components", []):
        cdir = (directory / comp).resolve()
        ck = _read_kustomization(cdir)
        if ck.get("kind") != "Component":
            raise KustomizeError(f"{cdir}: not a Component")
        for res in ck.get("resources", []):
            objs.extend(load_all(cdir / res))
        for patch, src in _patches(cdir, ck):
            _apply_patch(objs, patch, src)
    for patch, src in _patches(directory, k):
        _apply_patch(objs, patch, src)
    for rule in k.get("replicas", []):
        hits = [o for o in objs if o["metadata"]["name"] == rule["name"] and "replicas" in o.get("spec", {})]
        if not hits:
            raise KustomizeError(f"{directory}: replicas for unknown {rule['name']!r}")
        for o in hits:
            o["spec"]["replicas"] = rule["count"]
    for rule in k.get("images", []):
        for o in objs:
            for c in containers(o):
                c["image"] = _set_image(c["image"], rule)
    if "namespace" in k:
        for o in objs:
            if o["kind"] not in CLUSTER_SCOPED:
                o["metadata"]["namespace"] = k["namespace"]
    return objs


def load_module(path: Path, name: str) -> ModuleType:
    """Import a script that is not on the package path (deploy/docker/*.py)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


# ---- Which programs open etcd (read from the code) ---------------------------------

ENTRYPOINT_SCRIPT = DEPLOY / "docker" / "entrypoint.py"
BOOTSTRAP_SCRIPT = K8S / "base" / "etcd_auth_init.py"
# What each program the images run imports before it does anything: a service's
# __main__, the admin CLI with every command registered, the trainer library.
_PROGRAM_CODE = {
    "cli": "from gpufair.client.cli.main import build_parser; build_parser()",
    "trainer": "import gpufair.client, gpufair.client.init, gpufair.client.training, gpufair.client.datasets",
    "etcd-bootstrap": f"import runpy; runpy.run_path({str(BOOTSTRAP_SCRIPT)!r}, run_name='not_main')",
}


@functools.lru_cache(maxsize=None)
def opens_etcd(program: str) -> bool:
    """Whether `program` ("metrics", "scheduler", "cache", "cli", "trainer" or
    "etcd-bootstrap") loads an etcd client: a fresh interpreter imports its code
    and reports whether the etcd client library (aetcd) was loaded."""
    services = load_module(ENTRYPOINT_SCRIPT, "gpufair_deploy_entrypoint_support").SERVICES
    code = f"import {services[program]}.__main__" if program in services else _PROGRAM_CODE[program]
    done = subprocess.run([sys.executable, "-c", f"{code}\nimport sys; print('aetcd' in sys.modules)"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1] == "True"


def program_of(c: Obj) -> str | None:
    """Which gpufair program a container (k8s or compose) runs; None for other images and one-off commands."""
    image = image_name(str(c.get("image", "")))
    argv = [str(a) for a in (c.get("entrypoint") or []) + (c.get("command") or []) + (c.get("args") or [])]
    if any(a.endswith(BOOTSTRAP_SCRIPT.name) for a in argv):
        return "etcd-bootstrap"
    if image not in ("gpufair", "gpufair-trainer"):
        return None
    services = load_module(ENTRYPOINT_SCRIPT, "gpufair_deploy_entrypoint_support").SERVICES
    if argv and argv[0] in services:
        return argv[0]
    if "gpufair" in argv or (c.get("entrypoint") and "gpufair" in c["entrypoint"]):
        return "cli"
    if "torchrun" in argv or image == "gpufair-trainer":
        return "trainer"
    return None


def image_name(image: str) -> str:
    """`gpufair` of `registry/gpufair/gpufair:0.1.0@sha256:..` or compose's `${GPUFAIR_IMAGE:-gpufair:0.1.0}`."""
    return image.split(":-")[-1].rstrip("}").rsplit("/", 1)[-1].split("@")[0].split(":")[0]
