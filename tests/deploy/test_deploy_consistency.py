"""deploy/ agrees with the code: env vars, ports, gRPC service names, images, entrypoints."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

from deploy_support import (COMPOSE, DEPLOY, K8S, REPO, build, containers, load_all, load_module, opens_etcd, pod_spec,
                            program_of)
from gpufair.common.config import ENV_DOC

ENTRYPOINT = load_module(DEPLOY / "docker" / "entrypoint.py", "gpufair_deploy_entrypoint")
SOURCE_DIRS = ["gpufair", "client", "services", "examples"]
# Variables of other programs, set in gpufair containers on purpose.
FOREIGN = re.compile(r"^(OTEL_[A-Z_]+|PET_[A-Z_]+|OMP_NUM_THREADS)$")
GPUFAIR_IMAGES = {"gpufair", "gpufair-trainer"}
SERVICE_MODULES = {"metrics": "gpufair.api.metrics.v1.metrics_service_pb2",
                   "scheduler": "gpufair.api.scheduler.v1.scheduler_service_pb2",
                   "cache": "gpufair.api.cache.v1.cache_service_pb2"}


def _source_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for d in SOURCE_DIRS for p in (REPO / d).rglob("*.py"))


def default_port(service: str) -> int:
    """The port `python -m gpufair.<service>` binds by default, read from its __main__."""
    spec = importlib.util.find_spec(f"{ENTRYPOINT.SERVICES[service]}.__main__")
    assert spec and spec.origin, service
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "run_service":
            return int(node.args[1].value.rsplit(":", 1)[1])
    raise AssertionError(f"no run_service(...) call in {spec.origin}")


def grpc_service_name(service: str) -> str:
    (svc,) = importlib.import_module(SERVICE_MODULES[service]).DESCRIPTOR.services_by_name.values()
    return svc.full_name


def _image_name(image: str) -> str:
    return image.rsplit("/", 1)[-1].split("@")[0].split(":")[0]


def _k8s_env() -> dict[str, str]:
    """Every variable the rendered manifests give a gpufair container, with where."""
    found: dict[str, str] = {}
    objs = build(K8S / "overlays/example")
    config = {o["metadata"]["name"]: o["data"] for o in objs if o["kind"] == "ConfigMap"}
    for o in objs:
        for c in containers(o):
            if _image_name(c["image"]) in GPUFAIR_IMAGES:
                for e in c.get("env", []):
                    found.setdefault(e["name"], f"k8s {o['metadata']['name']}")
                for src in c.get("envFrom", []):
                    cm = src["configMapRef"]["name"]
                    for n in config[cm]:
                        found.setdefault(n, f"k8s ConfigMap {cm}")
    return found


def _compose() -> dict[str, Any]:
    (doc,) = load_all(COMPOSE)
    return doc


def _compose_env() -> dict[str, str]:
    found: dict[str, str] = {}
    for name, svc in _compose()["services"].items():
        if _image_name(svc["image"].split(":-")[-1].rstrip("}")) in GPUFAIR_IMAGES:
            for n in svc.get("environment", {}):
                found.setdefault(n, f"compose {name}")
    return found


def _documented(name: str) -> bool:
    if name in ENV_DOC or FOREIGN.match(name):
        return True
    base = name.removesuffix("_FILE")
    return name.endswith("_FILE") and base in ENV_DOC and "_FILE" in ENV_DOC[base][1]


ALL_ENV = {**_compose_env(), **_k8s_env()}


@pytest.mark.parametrize("name", sorted(ALL_ENV))
def test_env_var_is_documented_and_read_by_the_code(name: str) -> None:
    if FOREIGN.match(name):
        return
    text = _source_text()
    base = name.removesuffix("_FILE")
    read = f'"{name}"' in text or (name.endswith("_FILE") and f'"{base}"' in text and "_FILE" in text)
    assert read, f"{name} (set in {ALL_ENV[name]}) is read nowhere in the code: a typo?"
    assert _documented(name), f"{name} is read by the code but missing from ENV_DOC in gpufair/common/config.py"


def _service_containers() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for o in build(K8S / "overlays/example") + build(K8S / "base"):
        for c in containers(o, init=False):
            if c.get("args") and c["args"][0] in ENTRYPOINT.SERVICES:
                out.append((c["args"][0], c))
    return out


def test_k8s_ports_and_probes_match_what_each_service_serves() -> None:
    seen = set()
    for service, c in _service_containers():
        port, name = default_port(service), grpc_service_name(service)
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["GPUFAIR_LISTEN"].endswith(f":{port}"), service
        assert {"name": "grpc", "containerPort": port} in c["ports"], service
        probe = c["readinessProbe"]
        if "grpc" in probe:
            assert probe["grpc"] == {"port": port, "service": name}, service
        else:
            cmd = probe["exec"]["command"]
            assert cmd[cmd.index("--addr") + 1] == f"127.0.0.1:{port}" and cmd[cmd.index("--service") + 1] == name
        assert c["livenessProbe"]["tcpSocket"]["port"] == port
        seen.add(service)
    assert seen == set(ENTRYPOINT.SERVICES)


def test_k8s_services_and_client_addresses_use_the_default_ports() -> None:
    objs = build(K8S / "base")
    svc_port = {o["metadata"]["name"]: {p["name"]: p["port"] for p in o["spec"]["ports"]} for o in objs if o["kind"] == "Service"}
    (config,) = [o["data"] for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "gpufair-config"]
    for service in ENTRYPOINT.SERVICES:
        port = default_port(service)
        assert svc_port[f"gpufair-{service}"]["grpc"] == port
        assert config[f"GPUFAIR_{service.upper()}_ADDR"] == f"gpufair-{service}:{port}"


def test_compose_ports_and_healthchecks_match_what_each_service_serves() -> None:
    services = _compose()["services"]
    for service in ENTRYPOINT.SERVICES:
        svc, port, name = services[service], default_port(service), grpc_service_name(service)
        assert svc["command"] == [service]
        assert svc["environment"]["GPUFAIR_LISTEN"] == f"0.0.0.0:{port}"
        test = svc["healthcheck"]["test"]
        assert test[test.index("--addr") + 1] == f"127.0.0.1:{port}" and test[test.index("--service") + 1] == name
        for other in services.values():
            addr = other.get("environment", {}).get(f"GPUFAIR_{service.upper()}_ADDR")
            assert addr in (None, f"{service}:{port}")


def test_entrypoint_services_are_importable_modules() -> None:
    for service, module in ENTRYPOINT.SERVICES.items():
        assert importlib.util.find_spec(f"{module}.__main__") is not None, module
        assert service in module


def test_images_agree_between_compose_and_kubernetes() -> None:
    services = _compose()["services"]
    compose_images = {s["image"] for s in services.values()}
    k8s = {c["image"] for o in build(K8S / "base") for c in containers(o)}
    third_party = {i for i in k8s if _image_name(i) not in GPUFAIR_IMAGES}
    assert third_party <= compose_images, third_party - compose_images
    for image in third_party:
        tag = image.rsplit(":", 1)[-1]
        assert tag != "latest" and re.search(r"\d", tag), image
    ours = {_image_name(i): i.rsplit(":", 1)[-1] for i in k8s if _image_name(i) in GPUFAIR_IMAGES}
    compose_ours = {"gpufair": services["metrics"]["image"], "gpufair-trainer": services["trainer"]["image"]}
    for name, image in compose_ours.items():
        assert image.endswith(f"{name}:{ours[name]}}}"), (image, ours[name])


def _dockerfile() -> str:
    return (REPO / "Dockerfile").read_text(encoding="utf-8")


def test_dockerfile_is_pinned_multistage_non_root() -> None:
    text = _dockerfile()
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.M)
    assert base and re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", base.group(1)), "base image not pinned to a full version"
    stages = re.findall(r"^FROM \S+ AS (\S+)$", text, re.M)
    assert {"builder", "runtime", "trainer"} <= set(stages) and stages[-1] == "runtime"
    for stage in ("runtime", "trainer"):
        body = text.split(f" AS {stage}\n", 1)[1].split("\nFROM ", 1)[0]
        assert "USER 10001:10001" in body, stage
    assert 'ENTRYPOINT ["python", "/opt/gpufair/entrypoint.py"]' in text


def test_dockerfile_copies_exist_and_pass_dockerignore() -> None:
    allowed = [line[1:].rstrip("/") for line in (REPO / ".dockerignore").read_text().splitlines() if line.startswith("!")]
    for line in re.findall(r"^COPY (?!--from)(.+)$", _dockerfile(), re.M):
        *sources, _dest = line.split()
        for src in sources:
            assert (REPO / src).exists(), src
            assert any(src == a or src.startswith(a + "/") for a in allowed), f"{src} is excluded by .dockerignore"


# ---- etcd: only what opens it may reach it ------------------------------------

def test_only_services_and_the_bootstrap_open_etcd() -> None:
    # Read from the code: the CLI and the trainer library speak only gRPC.
    assert {p for p in ("metrics", "scheduler", "cache", "cli", "trainer", "etcd-bootstrap") if opens_etcd(p)} == \
        {"scheduler", "cache", "etcd-bootstrap"}


@pytest.mark.parametrize("target", ["base", "overlays/example"])
def test_every_k8s_component_that_opens_etcd_is_labelled_for_it_and_no_other(target: str) -> None:
    seen = set()
    for o in build(K8S / target):
        if pod_spec(o) is None:
            continue
        programs = {program_of(c) for c in containers(o, init=False)} - {None}
        if not programs:
            continue
        labelled = o["spec"]["template"]["metadata"]["labels"].get("gpufair.io/etcd-client") == "true"
        assert labelled == any(opens_etcd(p) for p in programs), (o["metadata"]["name"], programs)
        seen |= programs
    assert {"metrics", "scheduler", "cache", "trainer", "etcd-bootstrap"} <= seen


def test_every_compose_service_that_opens_etcd_gets_its_login_and_no_other() -> None:
    for name, svc in _compose()["services"].items():
        program = program_of(svc)
        if program is None:
            continue
        has_login = "GPUFAIR_ETCD_USERNAME" in svc.get("environment", {})
        assert has_login == opens_etcd(program), (name, program)
