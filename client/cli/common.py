"""What every CLI command shares: service addresses, tables, JSON, errors and exit codes.

Exit codes scripts can trust: 0 success, 1 a service is down or failed,
2 bad arguments or input (including INVALID_ARGUMENT/NOT_FOUND answers).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict

from gpufair.common.channels import sync_channel, token_metadata

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
_USAGE_CODES = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ALREADY_EXISTS,
                grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.PERMISSION_DENIED,
                grpc.StatusCode.UNAUTHENTICATED}


@dataclass(frozen=True)
class Endpoints:
    """Where the services are and how to reach them (the trainers' configuration plus etcd and S3)."""

    metrics: str
    scheduler: str
    cache: str
    etcd: str
    s3: str
    token: str
    tls_ca: str
    tls: bool = False
    client_cert: str = ""
    client_key: str = ""

    @classmethod
    def from_env(cls) -> "Endpoints":
        from gpufair.client.config import ClientConfig

        e = os.environ
        c = ClientConfig.from_env()
        # An operator's admin token wins over a job token that may also be set.
        admin = e.get("GPUFAIR_ADMIN_TOKEN", "")
        if not admin and e.get("GPUFAIR_ADMIN_TOKEN_FILE"):
            with open(e["GPUFAIR_ADMIN_TOKEN_FILE"], encoding="utf-8") as fh:
                admin = fh.read().strip()
        return cls(c.metrics_addr, c.scheduler_addr, c.cache_addr, e.get("GPUFAIR_ETCD", "127.0.0.1:2379"),
                   e.get("GPUFAIR_S3_ENDPOINT", "127.0.0.1:9000"), admin or c.token, c.tls_ca, c.tls, c.client_cert, c.client_key)

    @property
    def secure(self) -> bool:
        return self.tls or bool(self.tls_ca)

    def channel(self, address: str) -> grpc.Channel:
        return sync_channel(address, tls_ca=self.tls_ca, tls=self.tls, token=self.token if self.secure else "",
                            client_cert=self.client_cert, client_key=self.client_key)

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return () if self.secure else token_metadata(self.token)


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON for scripts")


def to_dict(msg: Any) -> dict[str, Any]:
    return MessageToDict(msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def fail(message: str, code: int = EXIT_FAIL) -> int:
    print(f"gpufair: {message}", file=sys.stderr)
    return code


def rpc(what: str, call: Callable[[], Any]) -> tuple[Any, int]:
    """Run one RPC; on failure print one clear line and return the exit code to use."""
    try:
        return call(), EXIT_OK
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
        details = exc.details() if hasattr(exc, "details") else str(exc)
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return None, fail(f"{what}: service unreachable ({code.name}): {details}")
        return None, fail(f"{what}: {code.name}: {details}", EXIT_USAGE if code in _USAGE_CODES else EXIT_FAIL)


def fmt(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}" if x else "-"
