"""Configuration from environment variables, read once in each `__main__`.

Every variable, its default and meaning is listed in `ENV_DOC` (rendered in
the README's configuration reference).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

ENV_DOC: dict[str, tuple[str, str]] = {
    "GPUFAIR_ETCD": ("127.0.0.1:2379", "etcd endpoint host:port"),
    "GPUFAIR_ETCD_ROOT": ("/gpufair", "key prefix for all gpufair state"),
    "GPUFAIR_ETCD_USERNAME": ("(none)", "etcd user, when etcd has authentication on"),
    "GPUFAIR_ETCD_PASSWORD": ("(none)", "etcd password (or GPUFAIR_ETCD_PASSWORD_FILE)"),
    "GPUFAIR_LISTEN": ("per service: 0.0.0.0:50051/50052/50053", "address a service binds (port 0 = any free port)"),
    "GPUFAIR_METRICS_ADDR": ("127.0.0.1:50051", "metrics service address for clients"),
    "GPUFAIR_SCHEDULER_ADDR": ("127.0.0.1:50052", "scheduler service address for clients"),
    "GPUFAIR_CACHE_ADDR": ("127.0.0.1:50053", "this node's cache service address for clients"),
    "GPUFAIR_S3_ENDPOINT": ("127.0.0.1:9000", "S3/MinIO endpoint host:port"),
    "GPUFAIR_S3_ACCESS_KEY": ("(none)", "S3 access key (or GPUFAIR_S3_ACCESS_KEY_FILE)"),
    "GPUFAIR_S3_SECRET_KEY": ("(none)", "S3 secret key (or GPUFAIR_S3_SECRET_KEY_FILE)"),
    "GPUFAIR_S3_SECURE": ("false", "use https to reach S3"),
    "GPUFAIR_NODE": ("the host name", "node name reported by trainers and the cache"),
    "GPUFAIR_CACHE_DIR": ("/var/cache/gpufair", "cache service: node-local cache directory"),
    "GPUFAIR_CACHE_CAPACITY": ("10GiB", "cache service: byte capacity (suffixes KiB, MiB, GiB)"),
    "GPUFAIR_CACHE_PART_SIZE": ("8MiB", "cache service: ranged-GET part size for large objects"),
    "GPUFAIR_CACHE_CONCURRENCY": ("8", "cache service: parts in flight at once"),
    "GPUFAIR_CACHE_ACTIVE_FETCHES": ("4", "cache service: datasets fetched at once"),
    "GPUFAIR_CACHE_RETRIES": ("2", "cache service: retries of a failed or changed fetch"),
    "GPUFAIR_POLICY": ("sd-maxmin", "scheduler: initial policy when none is stored in etcd"),
    "GPUFAIR_PERIOD_S": ("5", "scheduler: seconds between decision rounds"),
    "GPUFAIR_MIN_CHANGE": ("0.05", "scheduler: smallest fraction of a batch worth re-splitting"),
    "GPUFAIR_LEASE_TTL": ("10", "seconds before a dead process's liveness keys and leadership expire"),
    "GPUFAIR_LOG_LEVEL": ("INFO", "log level"),
    "GPUFAIR_PROMETHEUS_PORT": ("(off)", "serve Prometheus metrics on this port (0 = any free port)"),
    "OTEL_EXPORTER_OTLP_ENDPOINT": ("(off)", "send traces and metrics over OTLP/gRPC to this collector"),
    "GPUFAIR_TLS_CERT": ("(off)", "PEM certificate: serve TLS on every service port"),
    "GPUFAIR_TLS_KEY": ("(off)", "PEM private key for GPUFAIR_TLS_CERT"),
    "GPUFAIR_TLS_CLIENT_CA": ("(off)", "PEM CA: require client certificates (mutual TLS)"),
    "GPUFAIR_TLS_CA": ("(system)", "clients: PEM CA to verify servers"),
    "GPUFAIR_ADMIN_TOKEN": ("(off)", "bearer token for admin and mutating RPCs (or GPUFAIR_ADMIN_TOKEN_FILE)"),
    "GPUFAIR_JOB_TOKEN_SECRET": ("(derived from admin token)", "secret that signs per-job tokens (or _FILE)"),
    "GPUFAIR_OPEN_READS": ("true", "allow read-only queries without a token"),
    "GPUFAIR_JOB_TOKEN": ("(none)", "trainers: the job token from RegisterJob (or GPUFAIR_JOB_TOKEN_FILE)"),
    "GPUFAIR_TLS": ("false", "trainers and CLI: use TLS with the system CAs"),
    "GPUFAIR_TLS_CLIENT_CERT": ("(off)", "trainers: PEM client certificate for mutual TLS"),
    "GPUFAIR_TLS_CLIENT_KEY": ("(off)", "trainers: PEM key of GPUFAIR_TLS_CLIENT_CERT"),
    "GPUFAIR_DISABLE": ("false", "trainers: no remote calls at all (plain DDP behaviour)"),
    "GPUFAIR_FALLBACK_DIR": ("the temp dir", "trainers: where datasets go when no cache service answers"),
    "GPUFAIR_EMU_GPUS": ("1", "emulated GPUs: a count like 4 or relative speeds like 1,1,0.5"),
    "GPUFAIR_EMU_DIR": ("/dev/shm/gpufair-emu-<uid>", "emulated GPUs: shared lock directory"),
}


def _secret(env: Mapping[str, str], name: str) -> str:
    """A secret from `NAME` or from the file named by `NAME_FILE` (Kubernetes secrets)."""
    path = env.get(f"{name}_FILE", "")
    if path:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    return env.get(name, "")


def _flag(value: str) -> bool:
    return value.strip().lower() in {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class EtcdAuth:
    """etcd credentials (from a secret); empty means etcd has authentication off."""

    username: str = ""
    password: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "EtcdAuth":
        e = os.environ if env is None else env
        return cls(e.get("GPUFAIR_ETCD_USERNAME", ""), _secret(e, "GPUFAIR_ETCD_PASSWORD"))

    def __repr__(self) -> str:  # never print the password
        return f"EtcdAuth(username={self.username!r})"


@dataclass(frozen=True)
class TlsConfig:
    cert_file: str = ""
    key_file: str = ""
    client_ca_file: str = ""
    ca_file: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.cert_file and self.key_file)


@dataclass(frozen=True)
class AuthConfig:
    admin_token: str = ""
    job_token_secret: str = ""
    open_reads: bool = True

    @property
    def enabled(self) -> bool:
        return bool(self.admin_token)


@dataclass(frozen=True)
class CommonConfig:
    """What every service process reads from the environment."""

    listen: str
    etcd: str = "127.0.0.1:2379"
    etcd_root: str = "/gpufair"
    metrics_addr: str = "127.0.0.1:50051"
    scheduler_addr: str = "127.0.0.1:50052"
    cache_addr: str = "127.0.0.1:50053"
    node: str = ""
    log_level: str = "INFO"
    prometheus_port: int | None = None
    otlp_endpoint: str = ""
    lease_ttl: int = 10
    tls: TlsConfig = field(default_factory=TlsConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    etcd_auth: EtcdAuth = field(default_factory=EtcdAuth)

    @classmethod
    def from_env(cls, default_listen: str, env: Mapping[str, str] | None = None) -> "CommonConfig":
        e = os.environ if env is None else env
        prom = e.get("GPUFAIR_PROMETHEUS_PORT", "")
        admin = _secret(e, "GPUFAIR_ADMIN_TOKEN")
        return cls(
            listen=e.get("GPUFAIR_LISTEN", default_listen),
            etcd=e.get("GPUFAIR_ETCD", cls.etcd),
            etcd_root=e.get("GPUFAIR_ETCD_ROOT", cls.etcd_root),
            metrics_addr=e.get("GPUFAIR_METRICS_ADDR", cls.metrics_addr),
            scheduler_addr=e.get("GPUFAIR_SCHEDULER_ADDR", cls.scheduler_addr),
            cache_addr=e.get("GPUFAIR_CACHE_ADDR", cls.cache_addr),
            node=e.get("GPUFAIR_NODE", "") or os.uname().nodename,
            log_level=e.get("GPUFAIR_LOG_LEVEL", cls.log_level).upper(),
            prometheus_port=int(prom) if prom.strip() else None,
            otlp_endpoint=e.get("OTEL_EXPORTER_OTLP_ENDPOINT", ""),
            lease_ttl=int(e.get("GPUFAIR_LEASE_TTL", cls.lease_ttl)),
            tls=TlsConfig(
                cert_file=e.get("GPUFAIR_TLS_CERT", ""),
                key_file=e.get("GPUFAIR_TLS_KEY", ""),
                client_ca_file=e.get("GPUFAIR_TLS_CLIENT_CA", ""),
                ca_file=e.get("GPUFAIR_TLS_CA", ""),
            ),
            etcd_auth=EtcdAuth.from_env(e),
            auth=AuthConfig(
                admin_token=admin,
                job_token_secret=_secret(e, "GPUFAIR_JOB_TOKEN_SECRET") or admin,
                open_reads=_flag(e.get("GPUFAIR_OPEN_READS", "true")),
            ),
        )


@dataclass(frozen=True)
class S3Config:
    endpoint: str = "127.0.0.1:9000"
    access_key: str = ""
    secret_key: str = ""
    secure: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "S3Config":
        e = os.environ if env is None else env
        return cls(
            endpoint=e.get("GPUFAIR_S3_ENDPOINT", cls.endpoint),
            access_key=_secret(e, "GPUFAIR_S3_ACCESS_KEY"),
            secret_key=_secret(e, "GPUFAIR_S3_SECRET_KEY"),
            secure=_flag(e.get("GPUFAIR_S3_SECURE", "false")),
        )

    def __repr__(self) -> str:  # never print secrets in logs
        return f"S3Config(endpoint={self.endpoint!r}, secure={self.secure}, access_key={'***' if self.access_key else ''!r})"
