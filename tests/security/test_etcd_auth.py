"""etcd credentials come from configuration (a secret file) and are used by every etcd client."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from gpufair.common.config import EtcdAuth
from gpufair.common.errors import Unavailable
from gpufair.common.etcd import EtcdState
from gpufair.local import EtcdServer


async def _enable_auth(endpoint: str, password: str) -> None:
    """etcd's own admin calls: a root user with a password, then authentication on."""
    from aetcd import rpc

    async with grpc.aio.insecure_channel(endpoint) as ch:
        auth = rpc.AuthStub(ch)
        await auth.UserAdd(rpc.AuthUserAddRequest(name="root", password=password))
        await auth.UserGrantRole(rpc.AuthUserGrantRoleRequest(user="root", role="root"))
        await auth.AuthEnable(rpc.AuthEnableRequest())


async def test_services_use_etcd_credentials_from_a_secret_file(tmp_path: Path, monkeypatch) -> None:
    etcd = EtcdServer(workdir=tmp_path / "etcd").start()
    try:
        await _enable_auth(etcd.endpoint, "s3cret-pw")
        secret = tmp_path / "etcd-password"
        secret.write_text("s3cret-pw\n")
        monkeypatch.setenv("GPUFAIR_ETCD_USERNAME", "root")
        monkeypatch.setenv("GPUFAIR_ETCD_PASSWORD_FILE", str(secret))
        creds = EtcdAuth.from_env()
        assert creds.password == "s3cret-pw" and "s3cret" not in repr(creds)
        state = EtcdState(etcd.endpoint)  # reads the credentials from the environment
        try:
            await state.put("/gpufair/probe", {"ok": True})
            assert (await state.get("/gpufair/probe")).value == {"ok": True}
        finally:
            await state.close()
        anonymous = EtcdState(etcd.endpoint, auth=EtcdAuth())
        try:
            with pytest.raises(Unavailable, match="credentials"):
                await anonymous.get("/gpufair/probe")
            assert not await anonymous.ping()  # so health says NOT_SERVING
        finally:
            await anonymous.close()
    finally:
        etcd.close()


async def test_an_expired_auth_token_is_renewed_by_logging_in_again(tmp_path: Path) -> None:
    import asyncio

    etcd = EtcdServer(workdir=tmp_path / "etcd")
    etcd.extra_args = ["--auth-token-ttl", "1"]  # tokens die after 1 s idle
    etcd.start()
    try:
        await _enable_auth(etcd.endpoint, "pw")
        state = EtcdState(etcd.endpoint, auth=EtcdAuth("root", "pw"))
        try:
            await state.put("/gpufair/t", {"v": 1})
            await asyncio.sleep(3)  # idle past the token's life: etcd now rejects the old token
            assert (await state.get("/gpufair/t")).value == {"v": 1}
        finally:
            await state.close()
    finally:
        etcd.close()
