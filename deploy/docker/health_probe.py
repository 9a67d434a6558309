"""A gRPC health check for container probes (named so that it cannot shadow the
`grpc_health` package when run as a script): exit 0 when the service is SERVING.

    python health_probe.py --addr 127.0.0.1:50052 --service gpufair.scheduler.v1.SchedulerService

Kubernetes' built-in `grpc:` probe speaks plaintext only, so with TLS on a
service port the probes exec this script instead; it reads the service's own
TLS settings (GPUFAIR_TLS_CERT/KEY/CA/CLIENT_CA) so it needs no extra config.
Exit codes: 0 SERVING, 1 not serving or unreachable, 2 bad usage.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gpufair.common import env as declared  # the services' own variable declarations


@dataclass(frozen=True)
class Probe:
    """Where and how to ask."""

    addr: str
    service: str = ""
    timeout_s: float = 3.0
    tls: bool = False
    ca_file: str = ""
    cert_file: str = ""  # client certificate, only when the server asks for one (mutual TLS)
    key_file: str = ""
    authority: str = ""


def probe_from(args: argparse.Namespace, env: Mapping[str, str]) -> Probe:
    """Merge command-line flags with the service's TLS environment (read by the services' declarations)."""
    addr = args.addr or _local_addr(declared.LISTEN.read(env))
    if not addr:
        raise ValueError("no address: pass --addr HOST:PORT or set GPUFAIR_LISTEN")
    cert, key = declared.TLS_CERT.read(env), declared.TLS_KEY.read(env)
    tls = args.tls if args.tls is not None else bool(cert)
    mutual = bool(declared.TLS_CLIENT_CA.read(env))
    return Probe(
        addr=addr, service=args.service, timeout_s=args.timeout, tls=tls,
        ca_file=args.ca or declared.TLS_CA.read(env),
        cert_file=cert if tls and mutual else "",
        key_file=key if tls and mutual else "",
        # The probe dials 127.0.0.1; the certificate must then name `localhost`.
        authority=args.authority or ("localhost" if tls else ""),
    )


def _local_addr(listen: str) -> str:
    _, sep, port = listen.rpartition(":")
    return f"127.0.0.1:{port}" if sep and port.isdigit() and port != "0" else ""


def _channel(p: Probe) -> grpc.Channel:
    options = [("grpc.ssl_target_name_override", p.authority)] if p.tls and p.authority else []
    if not p.tls:
        return grpc.insecure_channel(p.addr)
    creds = grpc.ssl_channel_credentials(
        root_certificates=Path(p.ca_file).read_bytes() if p.ca_file else None,
        private_key=Path(p.key_file).read_bytes() if p.key_file else None,
        certificate_chain=Path(p.cert_file).read_bytes() if p.cert_file else None,
    )
    return grpc.secure_channel(p.addr, creds, options=options)


def check(p: Probe) -> tuple[bool, str]:
    """(serving, one-line status) for the probe."""
    with _channel(p) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=p.service), timeout=p.timeout_s)
        except grpc.RpcError as exc:
            return False, f"{p.addr}: {exc.code().name}: {exc.details()}"
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    return reply.status == health_pb2.HealthCheckResponse.SERVING, f"{p.addr} {p.service or '(server)'}: {status}"


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", default="", help="HOST:PORT (default: 127.0.0.1 and GPUFAIR_LISTEN's port)")
    parser.add_argument("--service", default="", help="full gRPC service name; empty = the whole server")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds")
    parser.add_argument("--tls", action=argparse.BooleanOptionalAction, default=None,
                        help="default: on when GPUFAIR_TLS_CERT is set")
    parser.add_argument("--ca", default="", help="PEM CA (default: GPUFAIR_TLS_CA, else system roots)")
    parser.add_argument("--authority", default="", help="TLS name to verify (default with TLS: localhost)")
    args = parser.parse_args(argv)
    try:
        probe = probe_from(args, os.environ if env is None else env)
        serving, line = check(probe)
    except (ValueError, OSError) as exc:
        print(f"health_probe: {exc}", file=sys.stderr)
        return 2
    print(line, file=sys.stdout if serving else sys.stderr)
    return 0 if serving else 1


if __name__ == "__main__":
    sys.exit(main())
