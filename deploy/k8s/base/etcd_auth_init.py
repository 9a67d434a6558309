"""Turn on etcd authentication for gpufair, idempotently (the etcd-auth-init Job and compose service).

    python etcd_auth_init.py --root-password-file /path/to/root-password

Reads the same variables as the services: GPUFAIR_ETCD (host:port),
GPUFAIR_ETCD_ROOT (key prefix), GPUFAIR_ETCD_USERNAME and
GPUFAIR_ETCD_PASSWORD_FILE. Creates etcd's `root` user, a `gpufair` role with
readwrite on the services' prefix, the services' user with that role, then
enables authentication and checks that the user can read its prefix.

Safe to rerun: users and roles that exist are kept; a password is set only
when it differs from the secret (setting it would revoke the running
services' tokens). Once authentication is on, root's password must match its
secret: rotate it with `etcdctl user passwd root` and then the secret.

Runs in the gpufair image (python, grpc, aetcd, gpufair): etcd's own image is
distroless since 3.5.7 and has no shell to script etcdctl with.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from aetcd import rpc

from gpufair.common import env as declared  # the services' own variable declarations

ROLE = "gpufair"
# EtcdState.ping() (gpufair/common/etcd.py) reads this key, outside GPUFAIR_ETCD_ROOT.
PING_KEY = "/gpufair-ping"
CALL_TIMEOUT_S = 10.0
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


class InitError(Exception):
    """Bad configuration, or etcd refused a step: the message says which."""


@dataclass(frozen=True)
class Plan:
    """What to create, from the environment and the secret files."""

    endpoint: str
    prefix: str  # the services' key prefix, ending in "/"
    user: str
    password: str
    root_password: str

    def __repr__(self) -> str:  # never print the passwords
        return f"Plan(endpoint={self.endpoint!r}, prefix={self.prefix!r}, user={self.user!r})"


def prefix_range(prefix: str) -> tuple[bytes, bytes]:
    """etcd's [key, range_end) covering every key that starts with `prefix`."""
    key = prefix.encode()
    end = bytearray(key)
    while end and end[-1] == 0xFF:
        end.pop()
    if not end:
        raise InitError(f"cannot build a key range for prefix {prefix!r}")
    end[-1] += 1
    return key, bytes(end)


def read_secret(path: str, what: str) -> str:
    """A secret file's content, stripped like gpufair.common.config reads it."""
    if not path:
        raise InitError(f"{what}: no file given")
    try:
        with open(path, encoding="utf-8") as fh:
            value = fh.read().strip()
    except OSError as exc:
        raise InitError(f"{what}: cannot read {path}: {exc.strerror}") from None
    if not value:
        raise InitError(f"{what}: {path} is empty")
    return value


def plan_from_env(env: Mapping[str, str], root_password_file: str) -> Plan:
    """The plan for the services' settings in `env` (read by the services' own declarations)."""
    root = declared.ETCD_ROOT.read(env).rstrip("/")
    if not root.startswith("/") or len(root) < 2:
        raise InitError(f"GPUFAIR_ETCD_ROOT must be an absolute key prefix like /gpufair, got {root!r}")
    user = declared.ETCD_USERNAME.read(env)
    if not user or user == "root":
        raise InitError("GPUFAIR_ETCD_USERNAME must name gpufair's own etcd user (not empty, not root)")
    return Plan(
        endpoint=declared.ETCD.read(env),
        prefix=root + "/",
        user=user,
        # A file only, here: the bootstrap never takes a password from a variable.
        password=read_secret(env.get("GPUFAIR_ETCD_PASSWORD_FILE", ""), "GPUFAIR_ETCD_PASSWORD_FILE"),
        root_password=read_secret(root_password_file, "--root-password-file"),
    )


def _token(auth: Any, user: str, password: str) -> str | None:
    """A token for `user`; None when etcd has authentication off."""
    try:
        return auth.Authenticate(rpc.AuthenticateRequest(name=user, password=password), timeout=CALL_TIMEOUT_S).token
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.FAILED_PRECONDITION and "not enabled" in (exc.details() or ""):
            return None
        raise


def wait_for_root_token(auth: Any, plan: Plan, wait_s: float) -> str | None:
    """Root's token (None while auth is off), retrying until etcd answers or `wait_s` passes."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return _token(auth, "root", plan.root_password)
        except grpc.RpcError as exc:
            if exc.code() not in RETRYABLE:
                raise InitError(f"etcd at {plan.endpoint} has authentication on and refused root's password "
                                f"from the secret ({exc.details()}); the secret must hold etcd's current one") from None
            if time.monotonic() > deadline:
                raise InitError(f"etcd at {plan.endpoint} did not answer within {wait_s:.0f} s: {exc.details()}") from None
            time.sleep(1.0)


def _password_matches(auth: Any, user: str, password: str, auth_on: bool) -> bool:
    if not auth_on:
        return False  # cannot check; no service holds a token yet, so setting it is harmless
    try:
        _token(auth, user, password)
        return True
    except grpc.RpcError:
        return False


def bootstrap(auth: Any, plan: Plan, token: str | None) -> None:
    """Users, role, permissions, then auth on. Every step tolerates having been done before."""
    md = (("token", token),) if token else None

    def call(method: Callable[..., Any], request: Any) -> Any:
        return method(request, metadata=md, timeout=CALL_TIMEOUT_S)

    users = set(call(auth.UserList, rpc.AuthUserListRequest()).users)
    for name, password in (("root", plan.root_password), (plan.user, plan.password)):
        if name not in users:
            call(auth.UserAdd, rpc.AuthUserAddRequest(name=name, password=password))
        elif not _password_matches(auth, name, password, token is not None):
            call(auth.UserChangePassword, rpc.AuthUserChangePasswordRequest(name=name, password=password))
    call(auth.UserGrantRole, rpc.AuthUserGrantRoleRequest(user="root", role="root"))
    if ROLE not in set(call(auth.RoleList, rpc.AuthRoleListRequest()).roles):
        call(auth.RoleAdd, rpc.AuthRoleAddRequest(name=ROLE))
    key, end = prefix_range(plan.prefix)
    grants = [rpc.Permission(permType=rpc.Permission.READWRITE, key=key, range_end=end),
              rpc.Permission(permType=rpc.Permission.READ, key=PING_KEY.encode())]
    for perm in grants:
        call(auth.RoleGrantPermission, rpc.AuthRoleGrantPermissionRequest(name=ROLE, perm=perm))
    call(auth.UserGrantRole, rpc.AuthUserGrantRoleRequest(user=plan.user, role=ROLE))
    if token is None:
        call(auth.AuthEnable, rpc.AuthEnableRequest())


def verify(channel: grpc.Channel, plan: Plan) -> None:
    """The services' user can log in and read its prefix."""
    token = _token(rpc.AuthStub(channel), plan.user, plan.password)
    if token is None:
        raise InitError("etcd still reports authentication off after AuthEnable")
    key, end = prefix_range(plan.prefix)
    rpc.KVStub(channel).Range(rpc.RangeRequest(key=key, range_end=end, limit=1, keys_only=True),
                              metadata=(("token", token),), timeout=CALL_TIMEOUT_S)


def run(plan: Plan, wait_s: float) -> None:
    """Connect, bootstrap and verify; raises InitError with a readable message."""
    with grpc.insecure_channel(plan.endpoint) as channel:
        auth = rpc.AuthStub(channel)
        try:
            token = wait_for_root_token(auth, plan, wait_s)
            bootstrap(auth, plan, token)
            verify(channel, plan)
        except grpc.RpcError as exc:
            raise InitError(f"etcd at {plan.endpoint} refused a step: {exc.code().name}: {exc.details()}") from None


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--root-password-file", required=True, help="file holding etcd's root password")
    parser.add_argument("--wait", type=float, default=300.0, help="seconds to wait for etcd to answer (default 300)")
    args = parser.parse_args(argv)
    try:
        plan = plan_from_env(os.environ if env is None else env, args.root_password_file)
        run(plan, args.wait)
    except InitError as exc:
        print(f"etcd-auth-init: {exc}", file=sys.stderr)
        return 1
    print(f"etcd-auth-init: authentication on at {plan.endpoint}; user {plan.user!r} "
          f"has readwrite on {plan.prefix} (role {ROLE!r})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
