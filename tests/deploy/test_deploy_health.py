"""deploy/docker: the container entrypoint and the gRPC health probe, against real servers."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from deploy_support import DEPLOY, load_module

HEALTH = load_module(DEPLOY / "docker" / "health_probe.py", "gpufair_deploy_health_probe")
ENTRY = load_module(DEPLOY / "docker" / "entrypoint.py", "gpufair_deploy_entrypoint2")
SERVICE = "gpufair.metrics.v1.MetricsService"


def _server(creds: grpc.ServerCredentials | None = None) -> tuple[grpc.Server, health.HealthServicer, int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_secure_port("127.0.0.1:0", creds) if creds else server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, servicer, port


@pytest.fixture
def plain() -> Iterator[tuple[health.HealthServicer, int]]:
    server, servicer, port = _server()
    yield servicer, port
    server.stop(0)


def test_serving_service_exits_zero(plain: tuple[health.HealthServicer, int]) -> None:
    servicer, port = plain
    servicer.set(SERVICE, health_pb2.HealthCheckResponse.SERVING)
    assert HEALTH.main(["--addr", f"127.0.0.1:{port}", "--service", SERVICE], env={}) == 0


def test_not_serving_or_unknown_service_exits_one(plain: tuple[health.HealthServicer, int]) -> None:
    servicer, port = plain
    servicer.set(SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
    assert HEALTH.main(["--addr", f"127.0.0.1:{port}", "--service", SERVICE], env={}) == 1
    assert HEALTH.main(["--addr", f"127.0.0.1:{port}", "--service", "no.such.Service"], env={}) == 1


def test_nothing_listening_exits_one() -> None:
    server, _, port = _server()
    server.stop(0)
    assert HEALTH.main(["--addr", f"127.0.0.1:{port}", "--timeout", "1"], env={}) == 1


def test_address_defaults_to_the_listen_port_and_usage_errors_exit_two(plain: tuple[health.HealthServicer, int]) -> None:
    servicer, port = plain
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    assert HEALTH.main([], env={"GPUFAIR_LISTEN": f"0.0.0.0:{port}"}) == 0
    assert HEALTH.main([], env={}) == 2
    assert HEALTH.main(["--addr", f"127.0.0.1:{port}"], env={"GPUFAIR_TLS_CERT": "/nonexistent.pem", "GPUFAIR_TLS_CA": "/nonexistent.pem"}) == 2


def _make_certs(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed: make-dev-certs.sh cannot run")
    out = tmp_path_factory.mktemp(name)
    subprocess.run(["bash", str(DEPLOY / "compose" / "make-dev-certs.sh"), str(out)], check=True, capture_output=True, timeout=60)
    return out


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _make_certs(tmp_path_factory, "certs")


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _make_certs(tmp_path_factory, "other") / "ca.pem"


def test_tls_probe_uses_the_services_own_tls_settings(certs: Path, other_ca: Path) -> None:
    creds = grpc.ssl_server_credentials([((certs / "server-key.pem").read_bytes(), (certs / "server.pem").read_bytes())])
    server, servicer, port = _server(creds)
    try:
        servicer.set(SERVICE, health_pb2.HealthCheckResponse.SERVING)
        env = {"GPUFAIR_TLS_CERT": str(certs / "server.pem"), "GPUFAIR_TLS_KEY": str(certs / "server-key.pem"),
               "GPUFAIR_TLS_CA": str(certs / "ca.pem")}
        assert HEALTH.main(["--addr", f"127.0.0.1:{port}", "--service", SERVICE], env=env) == 0
        # Plaintext against a TLS port (what the kubelet's grpc probe would do) fails.
        assert HEALTH.main(["--addr", f"127.0.0.1:{port}", "--service", SERVICE, "--no-tls", "--timeout", "1"], env={}) == 1
        # A certificate from another CA is refused.
        assert HEALTH.main(["--addr", f"127.0.0.1:{port}", "--service", SERVICE, "--ca", str(other_ca),
                            "--timeout", "1"], env=env) == 1
    finally:
        server.stop(0)


def test_mutual_tls_probe_presents_the_service_certificate(certs: Path) -> None:
    creds = grpc.ssl_server_credentials([((certs / "server-key.pem").read_bytes(), (certs / "server.pem").read_bytes())],
                                        root_certificates=(certs / "ca.pem").read_bytes(), require_client_auth=True)
    server, servicer, port = _server(creds)
    try:
        servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        env = {"GPUFAIR_TLS_CERT": str(certs / "server.pem"), "GPUFAIR_TLS_KEY": str(certs / "server-key.pem"),
               "GPUFAIR_TLS_CA": str(certs / "ca.pem"), "GPUFAIR_TLS_CLIENT_CA": str(certs / "ca.pem")}
        assert HEALTH.main(["--addr", f"127.0.0.1:{port}"], env=env) == 0
        no_client_cert = {k: v for k, v in env.items() if k != "GPUFAIR_TLS_CLIENT_CA"}
        assert HEALTH.main(["--addr", f"127.0.0.1:{port}", "--timeout", "1"], env=no_client_cert) == 1
    finally:
        server.stop(0)


def test_entrypoint_maps_names_to_commands() -> None:
    assert ENTRY.command_for(["scheduler", "--x"]) == [sys.executable, "-m", "gpufair.scheduler", "--x"]
    assert ENTRY.command_for(["health", "--addr", "a:1"])[1].endswith("health_probe.py")
    assert ENTRY.command_for(["torchrun", "train.py"]) == ["torchrun", "train.py"]
    assert ENTRY.command_for([]) is None and ENTRY.command_for(["help"]) is None


def test_entrypoint_runs_the_health_script_and_reports_bad_commands() -> None:
    script = str(DEPLOY / "docker" / "entrypoint.py")
    usage = subprocess.run([sys.executable, script, "health"], capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert usage.returncode == 2 and "no address" in usage.stderr
    missing = subprocess.run([sys.executable, script, "no-such-program-gpufair"], capture_output=True, text=True, timeout=30)
    assert missing.returncode == 127 and "cannot run" in missing.stderr
