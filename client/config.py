"""The trainer-side configuration, from environment variables (read when a session starts)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


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
    def from_env(cls, env: Mapping[str, str] | None = None) -> "ClientConfig":
        e = os.environ if env is None else env
        token = e.get("GPUFAIR_JOB_TOKEN", "") or e.get("GPUFAIR_ADMIN_TOKEN", "")
        token_file = e.get("GPUFAIR_JOB_TOKEN_FILE", "") or ("" if token else e.get("GPUFAIR_ADMIN_TOKEN_FILE", ""))
        if token_file:
            with open(token_file, encoding="utf-8") as fh:
                token = fh.read().strip()
        return cls(
            metrics_addr=e.get("GPUFAIR_METRICS_ADDR", cls.metrics_addr),
            scheduler_addr=e.get("GPUFAIR_SCHEDULER_ADDR", cls.scheduler_addr),
            cache_addr=e.get("GPUFAIR_CACHE_ADDR", cls.cache_addr),
            token=token,
            tls_ca=e.get("GPUFAIR_TLS_CA", ""),
            tls=e.get("GPUFAIR_TLS", "").lower() in {"1", "true", "yes"},
            client_cert=e.get("GPUFAIR_TLS_CLIENT_CERT", ""),
            client_key=e.get("GPUFAIR_TLS_CLIENT_KEY", ""),
            node=e.get("GPUFAIR_NODE", "") or os.uname().nodename,
            enabled=e.get("GPUFAIR_DISABLE", "").lower() not in {"1", "true", "yes"},
        )
