"""Configuration from environment variables, read once in each `__main__`.

Each variable is declared once, with its default, reader and meaning, in
`gpufair.common.env` (the README's configuration table is generated from it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpufair.common import env

def parse_endpoint(endpoint: str, what: str = "etcd endpoint") -> tuple[str, int]:
    """Split `host:port` (a leading `http://` is allowed; `[::1]:80` too) into its parts."""
    rest = endpoint.split("://", 1)[-1].rstrip("/")
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{what} {endpoint[:80]!r} is not host:port")
    return host.strip("[]"), int(port)


#: variable -> (default as documented, meaning), for checks that read the declarations.
ENV_DOC: dict[str, tuple[str, str]] = {v.name: (v.default_text, v.meaning) for v in env.VARS}


@dataclass(frozen=True)
class EtcdAuth:
    """etcd credentials (from a secret); empty means etcd has authentication off."""

    username: str = ""
    password: str = ""

    @classmethod
    def from_env(cls, e: Mapping[str, str] | None = None) -> "EtcdAuth":
        return cls(env.ETCD_USERNAME.read(e), env.ETCD_PASSWORD.read(e))

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
    def from_env(cls, default_listen: str, e: Mapping[str, str] | None = None) -> "CommonConfig":
        admin = env.ADMIN_TOKEN.read(e)
        return cls(
            listen=env.LISTEN.read(e) or default_listen,
            etcd=env.ETCD.read(e),
            etcd_root=env.ETCD_ROOT.read(e),
            metrics_addr=env.METRICS_ADDR.read(e),
            scheduler_addr=env.SCHEDULER_ADDR.read(e),
            cache_addr=env.CACHE_ADDR.read(e),
            node=env.NODE.read(e),
            log_level=env.LOG_LEVEL.read(e).upper(),
            prometheus_port=env.PROMETHEUS_PORT.read(e),
            otlp_endpoint=env.OTLP_ENDPOINT.read(e),
            lease_ttl=env.LEASE_TTL.read(e),
            tls=TlsConfig(cert_file=env.TLS_CERT.read(e), key_file=env.TLS_KEY.read(e),
                          client_ca_file=env.TLS_CLIENT_CA.read(e), ca_file=env.TLS_CA.read(e)),
            etcd_auth=EtcdAuth.from_env(e),
            auth=AuthConfig(admin_token=admin, job_token_secret=env.JOB_TOKEN_SECRET.read(e) or admin,
                            open_reads=env.OPEN_READS.read(e)),
        )


@dataclass(frozen=True)
class S3Config:
    endpoint: str = "127.0.0.1:9000"
    access_key: str = ""
    secret_key: str = ""
    secure: bool = False

    @classmethod
    def from_env(cls, e: Mapping[str, str] | None = None) -> "S3Config":
        return cls(endpoint=env.S3_ENDPOINT.read(e), access_key=env.S3_ACCESS_KEY.read(e),
                   secret_key=env.S3_SECRET_KEY.read(e), secure=env.S3_SECURE.read(e))

    def __repr__(self) -> str:  # never print secrets in logs
        return f"S3Config(endpoint={self.endpoint!r}, secure={self.secure}, access_key={'***' if self.access_key else ''!r})"
