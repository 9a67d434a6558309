"""The etcd-auth-init script (deploy/k8s/base/etcd_auth_init.py) against a real etcd.

The deploys run it before the services talk to etcd; these tests run the same
file: auth ends up on, gpufair's user reads and writes its prefix (leases
included) and nothing else, reruns change nothing that running services hold,
and bad input or a wrong root password give one clear line, never a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from deploy_support import K8S, load_module
from gpufair.common.config import EtcdAuth
from gpufair.common.errors import Unavailable
from gpufair.common.etcd import EtcdState
from gpufair.common.keys import Keys

INIT = load_module(K8S / "base" / "etcd_auth_init.py", "gpufair_etcd_auth_init")
ROOT = "/gpufair-deploytest"


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[str]:
    """A fresh etcd per test: enabling auth cannot be undone without root."""
    from gpufair.local import EtcdServer

    try:
        server = EtcdServer(workdir=tmp_path / "etcd").start()
    except RuntimeError as exc:  # no etcd binary: `make setup` installs it
        pytest.skip(str(exc))
    try:
        yield server.endpoint
    finally:
        server.close()


def _write(path: Path, text: str) -> str:
    path.write_text(text + "\n")
    return str(path)


@pytest.fixture
def env(tmp_path: Path, etcd: str) -> dict[str, str]:
    return {"GPUFAIR_ETCD": etcd, "GPUFAIR_ETCD_ROOT": ROOT, "GPUFAIR_ETCD_USERNAME": "gpufair",
            "GPUFAIR_ETCD_PASSWORD_FILE": _write(tmp_path / "gpufair-pw", "svc-pw-1")}


def _init(env: dict[str, str], root_file: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = INIT.main(["--root-password-file", root_file, "--wait", "5"], env)
    out, err = capsys.readouterr()
    return code, out, err


def _raw_get(endpoint: str, key: str, user: str | None, password: str | None) -> grpc.StatusCode:
    """Status of a Range on `key` as `user` (None: anonymous), straight over etcd's gRPC API."""
    from aetcd import rpc

    with grpc.insecure_channel(endpoint) as ch:
        md = None
        if user:
            token = rpc.AuthStub(ch).Authenticate(rpc.AuthenticateRequest(name=user, password=password), timeout=5).token
            md = (("token", token),)
        try:
            rpc.KVStub(ch).Range(rpc.RangeRequest(key=key.encode()), metadata=md, timeout=5)
            return grpc.StatusCode.OK
        except grpc.RpcError as exc:
            return exc.code()


async def test_bootstrap_turns_auth_on_and_confines_gpufair_to_its_prefix(
        env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _init(env, _write(tmp_path / "root-pw", "root-pw-1"), capsys)
    assert code == 0, err
    assert "svc-pw-1" not in out + err and "root-pw-1" not in out + err
    ep = env["GPUFAIR_ETCD"]
    state = EtcdState(ep, lease_ttl=5, auth=EtcdAuth("gpufair", "svc-pw-1"))
    try:
        keys = Keys(ROOT)
        await state.put(keys.policy(), {"name": "sd-maxmin"})
        assert (await state.get(keys.policy())).value == {"name": "sd-maxmin"}
        await state.put_live(keys.leader(), {"id": "a"})  # lease-bound, like the leader key
        assert await state.create_if_absent(keys.job_spec("j1"), {"job": "j1"})
        assert await state.ping()  # health reads /gpufair-ping, outside the prefix
    finally:
        await state.close()
    assert _raw_get(ep, "/other-app/x", "gpufair", "svc-pw-1") == grpc.StatusCode.PERMISSION_DENIED
    assert _raw_get(ep, "/gpufair-deploytestX", "gpufair", "svc-pw-1") == grpc.StatusCode.PERMISSION_DENIED
    assert _raw_get(ep, ROOT + "/jobs/j1/spec", None, None) != grpc.StatusCode.OK
    assert _raw_get(ep, "/other-app/x", "root", "root-pw-1") == grpc.StatusCode.OK
    anonymous = EtcdState(ep, auth=EtcdAuth())
    try:
        with pytest.raises(Unavailable, match="credentials"):
            await anonymous.get(Keys(ROOT).policy())
    finally:
        await anonymous.close()


async def test_rerun_keeps_running_clients_and_applies_a_rotated_password(
        env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root_file = _write(tmp_path / "root-pw", "root-pw-1")
    assert _init(env, root_file, capsys)[0] == 0
    state = EtcdState(env["GPUFAIR_ETCD"], auth=EtcdAuth("gpufair", "svc-pw-1"))
    try:
        await state.put(ROOT + "/probe", {"n": 1})
        code, _, err = _init(env, root_file, capsys)  # same secrets: nothing a client holds changes
        assert code == 0, err
        assert (await state.get(ROOT + "/probe")).value == {"n": 1}
    finally:
        await state.close()
    _write(Path(env["GPUFAIR_ETCD_PASSWORD_FILE"]), "svc-pw-2")  # rotate the Secret, rerun the Job
    assert _init(env, root_file, capsys)[0] == 0
    assert _raw_get(env["GPUFAIR_ETCD"], ROOT + "/probe", "gpufair", "svc-pw-2") == grpc.StatusCode.OK
    with pytest.raises(grpc.RpcError):
        _raw_get(env["GPUFAIR_ETCD"], ROOT + "/probe", "gpufair", "svc-pw-1")


def test_wrong_root_password_once_auth_is_on_fails_with_one_clear_line(
        env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _init(env, _write(tmp_path / "root-pw", "root-pw-1"), capsys)[0] == 0
    code, _, err = _init(env, _write(tmp_path / "other-root-pw", "not-it"), capsys)
    assert code == 1 and "refused root's password" in err and "not-it" not in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("change", "message"), [
    ({"GPUFAIR_ETCD_USERNAME": "root"}, "not root"),
    ({"GPUFAIR_ETCD_USERNAME": ""}, "GPUFAIR_ETCD_USERNAME"),
    ({"GPUFAIR_ETCD_ROOT": "gpufair"}, "GPUFAIR_ETCD_ROOT"),
    ({"GPUFAIR_ETCD_PASSWORD_FILE": "/nonexistent/pw"}, "cannot read /nonexistent/pw"),
])
def test_bad_configuration_is_refused_before_touching_etcd(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, str], message: str) -> None:
    env = {"GPUFAIR_ETCD": "127.0.0.1:9", "GPUFAIR_ETCD_USERNAME": "gpufair",
           "GPUFAIR_ETCD_PASSWORD_FILE": _write(tmp_path / "pw", "x"), **change}
    code, _, err = _init(env, _write(tmp_path / "root-pw", "r"), capsys)
    assert code == 1 and message in err and "Traceback" not in err


def test_empty_secret_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = {"GPUFAIR_ETCD_USERNAME": "gpufair", "GPUFAIR_ETCD_PASSWORD_FILE": _write(tmp_path / "pw", "x")}
    code, _, err = _init(env, _write(tmp_path / "root-pw", "  "), capsys)
    assert code == 1 and "is empty" in err


def test_prefix_range_covers_exactly_the_prefix() -> None:
    key, end = INIT.prefix_range("/gpufair/")
    inside = [b"/gpufair/", b"/gpufair/jobs/j/spec", b"/gpufair/\xff\xff"]
    outside = [b"/gpufair", b"/gpufair-ping", b"/gpufair0", b"/gpufairs/x", b"/other"]
    assert all(key <= k < end for k in inside)
    assert not any(key <= k < end for k in outside)
