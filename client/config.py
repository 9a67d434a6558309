"""The trainer-side configuration, from environment variables (read when a session starts)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpufair.common import env
from gpufair.common.errors import InvalidArgument


@dataclass(frozen=True)
class ClientConfig:
    metrics_addr: str = "127.0.0.1:50051"
    scheduler_addr: str = "127.0.0.1:50052"
    cache_addr: str = "127.0.0.1:50053"
    token: str = ""  # a job token, or the admin token (which also lets rank 0 register the job)
    tls_ca: str = ""
    tls: bool = False
    client_cert: str = ""  # for mutual TLS
    client_key: str = ""
    node: str = ""
    enabled: bool = True  # GPUFAIR_DISABLE=1 turns every remote call off (training runs as plain DDP)

    @classmethod
    def from_env(cls, e: Mapping[str, str] | None = None, *, prefer_admin: bool = False) -> "ClientConfig":
        """Read the GPUFAIR_* variables; a trainer's job token wins over the admin
        token, an operator's (`prefer_admin`, the CLI) the other way round."""
        try:
            job, admin = env.JOB_TOKEN.read(e), env.ADMIN_TOKEN.read(e)
            return cls(
                metrics_addr=env.METRICS_ADDR.read(e),
                scheduler_addr=env.SCHEDULER_ADDR.read(e),
                cache_addr=env.CACHE_ADDR.read(e),
                token=(admin or job) if prefer_admin else (job or admin),
                tls_ca=env.TLS_CA.read(e),
                tls=env.TLS.read(e),
                client_cert=env.TLS_CLIENT_CERT.read(e),
                client_key=env.TLS_CLIENT_KEY.read(e),
                node=env.NODE.read(e),
                enabled=not env.DISABLE.read(e),
            )
        except (ValueError, OSError) as exc:  # a malformed flag, an unreadable token file
            raise InvalidArgument(f"gpufair client configuration: {exc}") from None
