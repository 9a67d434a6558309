"""What every CLI command shares: service addresses, one RPC call-and-render path,
tables, JSON, and the one map from errors to exit codes.

Exit codes scripts can trust: 0 success, 1 a service is down or failed,
2 bad arguments or input (the caller's error: INVALID_ARGUMENT, NOT_FOUND,
PERMISSION_DENIED, ...), 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict

from gpufair.api.cache.v1 import cache_service_pb2_grpc
from gpufair.api.metrics.v1 import metrics_service_pb2_grpc
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc
from gpufair.client.config import ClientConfig
from gpufair.common import env
from gpufair.common.channels import sync_channel, token_metadata
from gpufair.common.errors import bounded

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

# Status names (gRPC's, and `GpufairError.code_name`) that mean the caller's input was wrong.
_USAGE_STATUSES = frozenset({"INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "FAILED_PRECONDITION",
                             "RESOURCE_EXHAUSTED", "PERMISSION_DENIED", "UNAUTHENTICATED", "OUT_OF_RANGE"})
_UNREACHABLE = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})


def exit_code(status: str) -> int:
    """The exit code for a failure with this status name (the one map every command uses)."""
    return EXIT_USAGE if status in _USAGE_STATUSES else EXIT_FAIL


_STUBS: dict[str, Callable[[grpc.Channel], Any]] = {
    "metrics": metrics_service_pb2_grpc.MetricsServiceStub,
    "scheduler": scheduler_service_pb2_grpc.SchedulerServiceStub,
    "cache": cache_service_pb2_grpc.CacheServiceStub,
}


@dataclass(frozen=True)
class Endpoints:
    """Where the services are and how to reach them (the trainers' configuration, plus S3 for `status`)."""

    metrics: str
    scheduler: str
    cache: str
    s3: str
    token: str
    tls_ca: str
    tls: bool = False
    client_cert: str = ""
    client_key: str = ""

    @classmethod
    def from_env(cls) -> "Endpoints":
        c = ClientConfig.from_env(prefer_admin=True)  # an operator's admin token wins over a job token
        return cls(c.metrics_addr, c.scheduler_addr, c.cache_addr, env.S3_ENDPOINT.read(), c.token, c.tls_ca, c.tls,
                   c.client_cert, c.client_key)

    @property
    def secure(self) -> bool:
        return self.tls or bool(self.tls_ca)

    def channel(self, address: str) -> grpc.Channel:
        return sync_channel(address, tls_ca=self.tls_ca, tls=self.tls, token=self.token if self.secure else "",
                            client_cert=self.client_cert, client_key=self.client_key)

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return () if self.secure else token_metadata(self.token)

    def stub(self, service: str) -> Any:
        """The generated stub of `service` ("metrics", "scheduler" or "cache")."""
        return _STUBS[service](self.channel(getattr(self, service)))


def in_range(kind: type, lo: float, hi: float, what: str) -> Callable[[str], Any]:
    """An argparse `type=` reading a `kind` (int or float) in [lo, hi]; its error
    names the limit (argparse adds the option's name)."""
    def read(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or value != value or not lo <= value <= hi:  # value != value: NaN
            raise argparse.ArgumentTypeError(f"{text[:40]!r}: expected {what} from {lo:,.10g} to {hi:,.10g}")
        return value
    return read


def int_list(text: str, lo: int, hi: int, what: str) -> list[int]:
    """Comma-separated integers, each in [lo, hi] (ValueError naming the entry and the limit)."""
    out = []
    for i, part in enumerate(text.split(",")):
        try:
            value = int(part)
        except ValueError:
            raise ValueError(f"{what} {text[:80]!r}: entry {i + 1} ({part[:20]!r}) is not an integer") from None
        if not lo <= value <= hi:
            raise ValueError(f"{what}: entry {i + 1} is {value}; each must be from {lo} to {hi}")
        out.append(value)
    return out


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
    print(f"gpufair: {bounded(message)}", file=sys.stderr)
    return code


def call(what: str, service: str, method: str, request: Any, *, timeout: float = 10.0,
         endpoints: Endpoints | None = None) -> tuple[Any, int]:
    """One RPC: (response, EXIT_OK), or (None, exit code) after one clear line on stderr."""
    ep = endpoints or Endpoints.from_env()
    try:
        return getattr(ep.stub(service), method)(request, metadata=ep.metadata, timeout=timeout), EXIT_OK
    except grpc.RpcError as exc:
        status = exc.code().name if hasattr(exc, "code") else "UNKNOWN"
        details = exc.details() if hasattr(exc, "details") else str(exc)
        if status in _UNREACHABLE:
            return None, fail(f"{what}: service unreachable ({status}): {details}")
        return None, fail(f"{what}: {status}: {details}", exit_code(status))


def call_and_render(args: argparse.Namespace, what: str, service: str, method: str, request: Any,
                    render: Callable[[Any], int | None], *, timeout: float = 10.0,
                    as_json: Callable[[Any], Any] = to_dict) -> int:
    """Run one RPC and show its answer: JSON with --json, else `render` (which may return an exit code)."""
    res, code = call(what, service, method, request, timeout=timeout)
    if code:
        return code
    if getattr(args, "json", False):
        print_json(as_json(res))
        return EXIT_OK
    return render(res) or EXIT_OK


def fmt(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}" if x else "-"
