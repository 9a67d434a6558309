"""deploy/compose: structure, secrets, healthchecks, dependencies (no Docker engine needed)."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest

from deploy_support import COMPOSE, load_all

GPUFAIR = ("metrics", "scheduler", "cache")
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
# Environment names that would carry a secret value; only *_FILE forms are allowed.
SECRET_WORDS = ("PASSWORD", "SECRET", "TOKEN")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    (doc,) = load_all(COMPOSE)
    return doc


def test_stack_has_every_part(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"etcd", "minio", "bucket-init", *GPUFAIR, "trainer"} <= set(services)
    assert services["trainer"]["profiles"] == ["train"]
    cmd = services["trainer"]["command"]
    assert cmd[0] == "torchrun" and cmd[cmd.index("--nproc-per-node") + 1] == "2"
    assert services["scheduler"]["deploy"]["replicas"] == 2


def test_gpufair_services_are_hardened_and_health_checked(compose: dict[str, Any]) -> None:
    for name in GPUFAIR:
        svc = compose["services"][name]
        assert svc["user"] == "10001:10001" and svc["read_only"] is True and svc["cap_drop"] == ["ALL"], name
        assert "/tmp" in svc["tmpfs"], name
        assert svc["healthcheck"]["test"][:2] == ["CMD", "python"] and "health_probe.py" in svc["healthcheck"]["test"][2]
        assert svc["build"]["target"] == "runtime"


def test_dependencies_name_real_services_and_conditions(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, svc in services.items():
        for dep, spec in svc.get("depends_on", {}).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            assert spec["condition"] in CONDITIONS
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep} to be healthy, which has no healthcheck"
    assert services["cache"]["depends_on"]["bucket-init"]["condition"] == "service_completed_successfully"


def test_secrets_are_files_never_environment(compose: dict[str, Any]) -> None:
    defined = compose["secrets"]
    for name, spec in defined.items():
        assert (COMPOSE.parent / spec["file"]).is_file(), name
    for name, svc in compose["services"].items():
        for ref in svc.get("secrets", []):
            assert (ref if isinstance(ref, str) else ref["source"]) in defined, f"{name}: {ref}"
        for var, value in (svc.get("environment") or {}).items():
            if any(w in var for w in SECRET_WORDS) and not var.endswith("_FILE"):
                pytest.fail(f"{name}: {var} would put a secret in the environment")
            if var.endswith("_FILE") and str(value).startswith("/run/secrets/"):
                secret = str(value).removeprefix("/run/secrets/")
                assert secret in (svc.get("secrets") or []), f"{name}: {var} names secret {secret} not mounted"


def test_tls_override_mounts_what_it_names() -> None:
    (doc,) = load_all(COMPOSE.parent / "docker-compose.tls.yaml")
    for name in GPUFAIR:
        env, secrets = doc["services"][name]["environment"], doc["services"][name]["secrets"]
        assert {env[k].removeprefix("/run/secrets/") for k in ("GPUFAIR_TLS_CERT", "GPUFAIR_TLS_KEY", "GPUFAIR_TLS_CA")} == set(secrets)
    assert set(doc["secrets"]) == {"tls_cert", "tls_key", "tls_ca"}


def _compose_cli() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30).returncode == 0


@pytest.mark.skipif(not _compose_cli(), reason="the docker compose plugin is not installed (docker is only a client here)")
def test_docker_compose_config_accepts_the_files() -> None:
    for files in (["docker-compose.yaml"], ["docker-compose.yaml", "docker-compose.tls.yaml"]):
        args = [a for f in files for a in ("-f", str(COMPOSE.parent / f))]
        if "docker-compose.tls.yaml" in files and not (COMPOSE.parent / "certs").is_dir():
            continue  # the TLS files are generated, not committed
        out = subprocess.run(["docker", "compose", *args, "--profile", "train", "config", "--quiet"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
