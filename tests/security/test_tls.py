"""TLS on service ports: verified clients get through, plaintext and unknown clients do not."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from gpufair.api.metrics.v1 import metrics_service_pb2 as mpb
from gpufair.api.metrics.v1 import metrics_service_pb2_grpc as mpb_grpc
from gpufair.common.channels import sync_channel
from gpufair.common.config import CommonConfig, TlsConfig
from gpufair.metrics.app import start as start_metrics

from .certs import make_pki


async def _serve(pki: dict[str, str], mutual: bool):
    tls = TlsConfig(cert_file=pki["server_cert"], key_file=pki["server_key"], client_ca_file=pki["ca"] if mutual else "")
    running, _ = await start_metrics(CommonConfig(listen="127.0.0.1:0", tls=tls))
    return running


def _list(address: str, **kw) -> int:
    with sync_channel(address, **kw) as ch:
        return len(mpb_grpc.MetricsServiceStub(ch).ListJobStats(mpb.ListJobStatsRequest(), timeout=5).jobs)


async def test_tls_port_serves_verified_clients_only(tmp_path: Path) -> None:
    import asyncio

    pki = make_pki(tmp_path)
    running = await _serve(pki, mutual=False)
    addr = f"127.0.0.1:{running.port}"
    try:
        assert await asyncio.to_thread(_list, addr, tls_ca=pki["ca"]) == 0
        with pytest.raises(grpc.RpcError):
            await asyncio.to_thread(_list, addr)  # plaintext against a TLS port
        other = make_pki(tmp_path / "other") if (tmp_path / "other").mkdir() is None else None
        with pytest.raises(grpc.RpcError):
            await asyncio.to_thread(_list, addr, tls_ca=other["ca"])  # a server we cannot verify
    finally:
        await running.stop(0)


async def test_mutual_tls_requires_a_client_certificate(tmp_path: Path) -> None:
    import asyncio

    pki = make_pki(tmp_path)
    running = await _serve(pki, mutual=True)
    addr = f"127.0.0.1:{running.port}"
    try:
        with pytest.raises(grpc.RpcError):
            await asyncio.to_thread(_list, addr, tls_ca=pki["ca"])
        assert await asyncio.to_thread(_list, addr, tls_ca=pki["ca"], client_cert=pki["client_cert"], client_key=pki["client_key"]) == 0
    finally:
        await running.stop(0)
