"""etcd credentials in the deploys: from secrets as files, for exactly the pods that talk to etcd.

The static checks read the rendered manifests and the compose file; the last
two materialise what a container would see (env, mounted Secret and ConfigMap
files) and run the real bootstrap script and a real gpufair etcd client with
it against a real etcd, so a wrong path, key or prefix fails here.
"""

from __future__ import annotations

import re

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy_support import COMPOSE, DEPLOY, K8S, build, containers, key, load_all, load_module, opens_etcd, pod_spec
from gpufair.common.config import CommonConfig, EtcdAuth
from gpufair.common.etcd import EtcdState
from gpufair.common.keys import Keys

ENTRYPOINT = load_module(DEPLOY / "docker" / "entrypoint.py", "gpufair_deploy_entrypoint_auth")
SCRIPT = K8S / "base" / "etcd_auth_init.py"
INIT = load_module(SCRIPT, "gpufair_etcd_auth_init_wiring")
Obj = dict[str, Any]


def etcd_services() -> set[str]:
    """gpufair services whose code opens an etcd client (read from the code, not assumed)."""
    return {service for service in ENTRYPOINT.SERVICES if opens_etcd(service)}


def test_the_services_that_use_etcd_are_known() -> None:
    # metrics keeps its windows in memory: it gets no etcd credentials.
    assert etcd_services() == {"scheduler", "cache"}


# ---- Kubernetes -----------------------------------------------------------

@pytest.fixture(scope="module")
def overlay() -> list[Obj]:
    return build(K8S / "overlays/example")


def _env(c: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in c.get("env", [])}


def _etcd_pods(objs: list[Obj]) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in objs if pod_spec(o) is not None
            and o["spec"]["template"]["metadata"]["labels"].get("gpufair.io/etcd-client") == "true"}


def _mounted_secret_file(o: Obj, c: Obj, path: str) -> tuple[str, str]:
    """(Secret name, key) that `path` is in this container, or fail."""
    volumes = {v["name"]: v for v in pod_spec(o)["volumes"]}
    for m in c.get("volumeMounts", []):
        prefix = m["mountPath"].rstrip("/") + "/"
        if path.startswith(prefix) and "secret" in volumes[m["name"]]:
            return volumes[m["name"]]["secret"]["secretName"], path.removeprefix(prefix)
    raise AssertionError(f"{key(o)}: {path} is in no mounted Secret")


@pytest.mark.parametrize("target", ["base", "overlays/example"])
def test_every_pod_that_may_reach_etcd_logs_in_with_a_password_file(target: str) -> None:
    objs = build(K8S / target)
    pods = _etcd_pods(objs)
    assert {f"gpufair-{s}" for s in etcd_services()} | {"etcd-auth-init"} == set(pods)
    for name, o in pods.items():
        (c,) = list(containers(o, init=False))
        env = _env(c)
        assert "GPUFAIR_ETCD_PASSWORD" not in env, f"{name}: the password must be a file, not a variable"
        assert env["GPUFAIR_ETCD_USERNAME"]["valueFrom"]["secretKeyRef"] == {"name": "gpufair-etcd", "key": "username"}
        secret = _mounted_secret_file(o, c, env["GPUFAIR_ETCD_PASSWORD_FILE"]["value"])
        assert secret == ("gpufair-etcd", "password"), name
        assert "GPUFAIR_ETCD_ROOT" not in env or name == "etcd-auth-init", f"{name} overrides the shared prefix"


def test_no_gpufair_container_gets_a_secret_as_a_value(overlay: list[Obj]) -> None:
    for o in overlay:
        if o["kind"] == "ConfigMap":
            assert not [k for k in o["data"] if any(w in k for w in ("PASSWORD", "SECRET", "TOKEN")) and not k.endswith("_FILE")]
        for c in containers(o):
            if c["image"].rsplit("/", 1)[-1].startswith("gpufair"):
                bad = [n for n in _env(c) if any(w in n for w in ("PASSWORD", "SECRET", "TOKEN")) and not n.endswith("_FILE")]
                assert not bad, f"{key(o)}: {bad}"


def test_only_the_bootstrap_job_sees_etcd_root(overlay: list[Obj]) -> None:
    users = {o["metadata"]["name"] for o in overlay if pod_spec(o) is not None
             and any(v.get("secret", {}).get("secretName") == "etcd-root" for v in pod_spec(o)["volumes"])}
    assert users == {"etcd-auth-init"}


def test_bootstrap_job_grants_the_prefix_the_services_read(overlay: list[Obj]) -> None:
    objs = {key(o): o for o in overlay}
    job = objs[("Job", "etcd-auth-init")]
    (c,) = list(containers(job))
    env = _env(c)
    for var in ("GPUFAIR_ETCD", "GPUFAIR_ETCD_ROOT"):  # the services get both from this ConfigMap
        assert env[var]["valueFrom"]["configMapKeyRef"] == {"name": "gpufair-config", "key": var}
    for svc in etcd_services():
        kind = "DaemonSet" if ("DaemonSet", f"gpufair-{svc}") in objs else "Deployment"
        (sc,) = list(containers(objs[(kind, f"gpufair-{svc}")], init=False))
        assert {"configMapRef": {"name": "gpufair-config"}} in sc["envFrom"], svc
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure" and job["spec"]["backoffLimit"] >= 5
    script_cm = objs[("ConfigMap", "etcd-auth-init")]
    assert script_cm["data"][SCRIPT.name] == SCRIPT.read_text(encoding="utf-8")
    assert c["args"][:2] == ["python", f"{_mount_of(job, c, 'script')}/{SCRIPT.name}"]


def _mount_of(o: Obj, c: Obj, volume: str) -> str:
    return next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == volume)


def test_dev_secrets_are_placeholders(overlay: list[Obj]) -> None:
    secrets = {o["metadata"]["name"]: o["stringData"] for o in overlay if o["kind"] == "Secret"}
    assert secrets["etcd-root"]["password"].startswith("CHANGE-ME")
    assert secrets["gpufair-etcd"]["password"].startswith("CHANGE-ME") and secrets["gpufair-etcd"]["username"] != "root"


# ---- Compose --------------------------------------------------------------

@pytest.fixture(scope="module")
def compose() -> Obj:
    (doc,) = load_all(COMPOSE)
    return doc


def test_compose_etcd_clients_get_the_user_and_a_mounted_password_file(compose: Obj) -> None:
    services = compose["services"]
    for name in etcd_services() | {"etcd-init"}:
        env, secrets = services[name]["environment"], services[name]["secrets"]
        assert "GPUFAIR_ETCD_PASSWORD" not in env, name
        assert env["GPUFAIR_ETCD_USERNAME"] == "gpufair", name
        secret = env["GPUFAIR_ETCD_PASSWORD_FILE"].removeprefix("/run/secrets/")
        assert secret in secrets and (COMPOSE.parent / compose["secrets"][secret]["file"]).is_file(), name
    for name, svc in services.items():
        if name not in etcd_services() | {"etcd-init"}:
            assert "etcd_gpufair_password" not in svc.get("secrets", []), f"{name} needs no etcd login"
        if name != "etcd-init":
            assert "etcd_root_password" not in svc.get("secrets", []), name


def test_compose_bootstrap_runs_first_on_the_same_prefix(compose: Obj) -> None:
    services = compose["services"]
    init = services["etcd-init"]
    assert init["depends_on"] == {"etcd": {"condition": "service_healthy"}} and init["restart"] == "no"
    for svc in etcd_services():
        assert services[svc]["depends_on"]["etcd-init"] == {"condition": "service_completed_successfully"}
        for var in ("GPUFAIR_ETCD", "GPUFAIR_ETCD_ROOT", "GPUFAIR_ETCD_USERNAME", "GPUFAIR_ETCD_PASSWORD_FILE"):
            assert services[svc]["environment"][var] == init["environment"][var], (svc, var)
    (cfg,) = init["configs"]
    assert (COMPOSE.parent / compose["configs"][cfg["source"]]["file"]).resolve() == SCRIPT
    assert init["command"][:2] == ["python", cfg["target"]]
    # etcd's healthcheck must keep passing once auth refuses anonymous reads.
    assert "health" not in services["etcd"]["healthcheck"]["test"]


def test_compose_secret_files_are_placeholders(compose: Obj) -> None:
    for name in ("etcd_root_password", "etcd_gpufair_password"):
        assert (COMPOSE.parent / compose["secrets"][name]["file"]).read_text().startswith("CHANGE-ME"), name


# ---- The wiring, run for real ---------------------------------------------

@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[str]:
    from gpufair.local import EtcdServer

    try:
        server = EtcdServer(workdir=tmp_path / "etcd").start()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    try:
        yield server.endpoint
    finally:
        server.close()


def _k8s_view(objs: list[Obj], o: Obj, root: Path) -> tuple[dict[str, str], dict[str, Path]]:
    """A container's environment and its mounted Secret/ConfigMap files, written under `root`."""
    data = {key(x): {**x.get("data", {}), **x.get("stringData", {})} for x in objs if x["kind"] in {"Secret", "ConfigMap"}}
    (c,) = list(containers(o, init=False))
    env: dict[str, str] = {}
    for src in c.get("envFrom", []):
        env.update(data[("ConfigMap", src["configMapRef"]["name"])])
    for e in c.get("env", []):
        ref = e.get("valueFrom", {})
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "secretKeyRef" in ref or "configMapKeyRef" in ref:
            kind, r = ("Secret", ref["secretKeyRef"]) if "secretKeyRef" in ref else ("ConfigMap", ref["configMapKeyRef"])
            env[e["name"]] = data[(kind, r["name"])][r["key"]]
    volumes = {v["name"]: v for v in pod_spec(o)["volumes"]}
    mounts: dict[str, Path] = {}
    for m in c.get("volumeMounts", []):
        v = volumes[m["name"]]
        src = ("Secret", v["secret"]["secretName"]) if "secret" in v else ("ConfigMap", v["configMap"]["name"]) if "configMap" in v else None
        if src is None or src not in data:
            continue
        where = root / m["name"]
        where.mkdir(parents=True)
        for k, text in data[src].items():
            (where / k).write_text(text)
        mounts[m["mountPath"]] = where
    return {n: _remap(v, mounts) for n, v in env.items()}, mounts


def _remap(value: str, mounts: dict[str, Path]) -> str:
    for mount, local in mounts.items():
        if value.startswith(mount.rstrip("/") + "/"):
            return str(local / value[len(mount.rstrip("/")) + 1:])
    return value


async def test_k8s_wiring_bootstraps_etcd_and_the_services_log_in(etcd: str, tmp_path: Path) -> None:
    objs = build(K8S / "overlays/example")
    by_key = {key(o): o for o in objs}
    env, mounts = _k8s_view(objs, by_key[("Job", "etcd-auth-init")], tmp_path / "job")
    env["GPUFAIR_ETCD"] = etcd  # the Service name etcd:2379 stands for this one
    (c,) = list(containers(by_key[("Job", "etcd-auth-init")]))
    args = [_remap(a, mounts) for a in c["args"][2:]]
    assert load_module(Path(_remap(c["args"][1], mounts)), "etcd_auth_init_from_configmap").main(args, env) == 0
    for svc in sorted(etcd_services()):
        kind = "DaemonSet" if ("DaemonSet", f"gpufair-{svc}") in by_key else "Deployment"
        senv, _ = _k8s_view(objs, by_key[(kind, f"gpufair-{svc}")], tmp_path / svc)
        config = CommonConfig.from_env("0.0.0.0:0", {**senv, "GPUFAIR_ETCD": etcd})
        await _logs_in_and_writes(config, svc)


async def test_compose_wiring_bootstraps_etcd_and_the_services_log_in(etcd: str, compose: Obj) -> None:
    secrets = {f"/run/secrets/{n}": str(COMPOSE.parent / s["file"]) for n, s in compose["secrets"].items()}
    init = compose["services"]["etcd-init"]
    env = {**{k: secrets.get(str(v), str(v)) for k, v in init["environment"].items()}, "GPUFAIR_ETCD": etcd}
    args = [secrets.get(a, a) for a in init["command"][2:]]
    assert INIT.main(args, env) == 0
    for svc in sorted(etcd_services()):
        # compose fills ${NAME:-default} from the shell; with nothing set, the default.
        senv = {k: re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", secrets.get(str(v), str(v)))
                for k, v in compose["services"][svc]["environment"].items()}
        await _logs_in_and_writes(CommonConfig.from_env("0.0.0.0:0", {**senv, "GPUFAIR_ETCD": etcd}), svc)


async def _logs_in_and_writes(config: CommonConfig, svc: str) -> None:
    assert config.etcd_auth.username and config.etcd_auth.password, svc
    state = EtcdState(config.etcd, lease_ttl=5, auth=config.etcd_auth)
    try:
        assert await state.ping(), f"{svc}: health would stay NOT_SERVING"
        await state.put_live(Keys(config.etcd_root).leader(), {"by": svc})
        assert (await state.get(Keys(config.etcd_root).leader())).value == {"by": svc}
    finally:
        await state.close()
    anonymous = EtcdState(config.etcd, auth=EtcdAuth())
    try:
        assert not await anonymous.ping(), "etcd still answers without credentials"
    finally:
        await anonymous.close()
