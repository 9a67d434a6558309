"""Every environment variable gpufair reads: one declaration each (name, default,
reader, doc), read once where a process starts (pure: nothing is read at import).

The README's configuration table is generated from `VARS`
(`python scripts/gen_env_doc.py`; a test fails when it drifts). Rules that hold
for every variable: an empty value means unset (the default applies); a
variable marked `secret` may instead name a file with `NAME_FILE` (Kubernetes
and compose secrets), which wins; a flag is true for 1/true/yes/on and false
for 0/false/no/off, and anything else is an error naming the variable.
"""

from __future__ import annotations

import math
import os
import re
import socket
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from gpufair.common import limits

T = TypeVar("T")
Env = Mapping[str, str]

_TRUE, _FALSE = frozenset({"1", "true", "yes", "on"}), frozenset({"0", "false", "no", "off"})
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
          "t": 1000**4, "tb": 1000**4, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def text(name: str, raw: str) -> str:
    return raw


def flag(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE or value in _FALSE:
        return value in _TRUE
    raise ValueError(f"{name}={_shown(raw)}: expected a boolean: true/false, 1/0, yes/no or on/off")


def _shown(raw: str, limit: int = 40) -> str:
    return repr(raw) if len(raw) <= limit else f"{raw[:limit]!r}... ({len(raw)} characters)"


def whole(lo: int, hi: int, what: str = "a whole number") -> Callable[[str, str], int]:
    """A reader of integers in [lo, hi]; its error names the variable, the value and what is expected."""
    def read(name: str, raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            value = None
        if value is None or not lo <= value <= hi:
            raise ValueError(f"{name}={_shown(raw)}: expected {what} from {lo} to {hi}")
        return value
    return read


def real(lo: float, hi: float, what: str = "a number") -> Callable[[str, str], float]:
    """A reader of finite numbers in [lo, hi] (errors as `whole`)."""
    def read(name: str, raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and lo <= value <= hi):
            raise ValueError(f"{name}={_shown(raw)}: expected {what} from {lo:g} to {hi:g}")
        return value
    return read


def one_of(*choices: str) -> Callable[[str, str], str]:
    """A reader of one of `choices` (case-insensitive; returned as written there)."""
    def read(name: str, raw: str) -> str:
        for c in choices:
            if raw.strip().lower() == c.lower():
                return c
        raise ValueError(f"{name}={_shown(raw)}: expected one of {', '.join(choices)}")
    return read


def optional(read: Callable[[str, str], T]) -> Callable[[str, str], T | None]:
    """`read`, or None for an unset variable."""
    return lambda name, raw: read(name, raw) if raw.strip() else None


def parse_size(raw: str, what: str = "size") -> int:
    """Parse `10GiB`, `500MB`, `1048576` into bytes (ValueError naming `what` otherwise)."""
    m = _SIZE.match(raw)
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _UNITS:
        raise ValueError(f"{what}={_shown(raw)}: expected a size such as 1048576, 500MB or 10GiB")
    return int(float(m.group(1)) * _UNITS[unit])


def size(name: str, raw: str) -> int:
    return parse_size(raw, name)


def host_name() -> str:
    """This machine's short host name (a valid key segment), the default node name."""
    return socket.gethostname().split(".")[0] or "local"


def _emu_dir() -> str:
    # Shared memory when there is some: the emulated GPUs' lock files then never touch a disk.
    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    return os.path.join(base, f"gpufair-emu-{os.getuid()}")


def _pod_namespace() -> str:
    # The namespace Kubernetes mounts with a pod's service account token; "default" elsewhere.
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace", encoding="utf-8") as fh:
            return fh.read().strip() or "default"
    except OSError:
        return "default"


@dataclass(frozen=True)
class Var(Generic[T]):
    """One environment variable: its name, default, how it is read, and what it means."""

    name: str
    default: str | Callable[[], str]
    doc: str
    parse: Callable[[str, str], T]
    shown: str = ""  # the default as the docs show it, when it is not the literal default
    secret: bool = False  # may also be given as a file named by NAME_FILE

    def raw(self, env: Env | None = None) -> str:
        """The value as text: NAME_FILE's content for secrets, else NAME, else the default."""
        e = os.environ if env is None else env
        path = e.get(f"{self.name}_FILE", "") if self.secret else ""
        if path:
            with open(path, encoding="utf-8") as fh:
                return fh.read().strip()
        value = e.get(self.name, "")
        if value != "":
            return value
        return self.default() if callable(self.default) else self.default

    def read(self, env: Env | None = None) -> T:
        """The parsed value (ValueError naming the variable if it does not parse)."""
        return self.parse(self.name, self.raw(env))

    @property
    def meaning(self) -> str:
        return f"{self.doc} (or {self.name}_FILE)" if self.secret else self.doc

    @property
    def default_text(self) -> str:
        return self.shown or str(self.default)


def _v(name: str, default: str | Callable[[], str], doc: str, parse: Callable[[str, str], T] = text,  # type: ignore[assignment]
       shown: str = "", secret: bool = False) -> Var[T]:
    return Var(name, default, doc, parse, shown, secret)


ETCD = _v("GPUFAIR_ETCD", "127.0.0.1:2379", "etcd endpoint host:port (services only)")
ETCD_ROOT = _v("GPUFAIR_ETCD_ROOT", "/gpufair", "key prefix for all gpufair state")
ETCD_USERNAME = _v("GPUFAIR_ETCD_USERNAME", "", "etcd user, when etcd has authentication on", shown="(none)")
ETCD_PASSWORD = _v("GPUFAIR_ETCD_PASSWORD", "", "etcd password", shown="(none)", secret=True)
LISTEN = _v("GPUFAIR_LISTEN", "", "address a service binds (port 0 = any free port)",
            shown="per service: 0.0.0.0:50051/50052/50053")
METRICS_ADDR = _v("GPUFAIR_METRICS_ADDR", "127.0.0.1:50051", "metrics service address for clients")
SCHEDULER_ADDR = _v("GPUFAIR_SCHEDULER_ADDR", "127.0.0.1:50052", "scheduler service address for clients")
CACHE_ADDR = _v("GPUFAIR_CACHE_ADDR", "127.0.0.1:50053", "this node's cache service address for clients")
S3_ENDPOINT = _v("GPUFAIR_S3_ENDPOINT", "127.0.0.1:9000", "S3/MinIO endpoint host:port")
S3_ACCESS_KEY = _v("GPUFAIR_S3_ACCESS_KEY", "", "S3 access key", shown="(none)", secret=True)
S3_SECRET_KEY = _v("GPUFAIR_S3_SECRET_KEY", "", "S3 secret key", shown="(none)", secret=True)
S3_SECURE = _v("GPUFAIR_S3_SECURE", "false", "use https to reach S3", flag)
NODE = _v("GPUFAIR_NODE", host_name, "node name reported by trainers and the cache", shown="the host name")
CACHE_DIR = _v("GPUFAIR_CACHE_DIR", "/var/cache/gpufair", "cache service: node-local cache directory")
CACHE_CAPACITY = _v("GPUFAIR_CACHE_CAPACITY", "10GiB", "cache service: byte capacity (suffixes KiB, MiB, GiB)", size)
CACHE_PART_SIZE = _v("GPUFAIR_CACHE_PART_SIZE", "8MiB", "cache service: ranged-GET part size for large objects", size)
CACHE_CONCURRENCY = _v("GPUFAIR_CACHE_CONCURRENCY", "8", "cache service: parts in flight at once", whole(1, 256))
CACHE_ACTIVE_FETCHES = _v("GPUFAIR_CACHE_ACTIVE_FETCHES", "4", "cache service: datasets fetched at once", whole(1, 256))
CACHE_RETRIES = _v("GPUFAIR_CACHE_RETRIES", "2", "cache service: retries of a failed or changed fetch", whole(0, 100))
POLICY = _v("GPUFAIR_POLICY", "sd-maxmin", "scheduler: initial policy when none is stored in etcd")
PRESET = _v("GPUFAIR_PRESET", "", "scheduler: the levers until a policy is stored: gpufair (queue by slow-down, "
            "placement, paced GPU shares) or k8s; unset: FIFO admission, time-slicing, the split lever alone",
            optional(one_of("gpufair", "k8s")), shown="(split only)")
PERIOD_S = _v("GPUFAIR_PERIOD_S", "5", "scheduler: seconds between decision rounds", real(*limits.PERIOD_S, "seconds"))
MIN_CHANGE = _v("GPUFAIR_MIN_CHANGE", "0.05", "scheduler: smallest fraction of a batch worth re-splitting",
                real(*limits.MIN_CHANGE, "a fraction"))
JOB_LOST_S = _v("GPUFAIR_JOB_LOST_S", "30", "scheduler: seconds a running job may have no live rank before it ends "
                "(failed; finished if its work was done)", real(1, 86400, "seconds"))
JOB_RETENTION_S = _v("GPUFAIR_JOB_RETENTION_S", "604800", "scheduler: seconds an ended job's record stays listed "
                     "(`gpufair jobs --all`) before it is purged (default 7 days)", real(0, 10 * 365 * 86400, "seconds"))
JOB_RETENTION_MAX = _v("GPUFAIR_JOB_RETENTION_MAX", "1000", "scheduler: most ended job records kept; older ones are purged first",
                       whole(0, 100_000))
K8S = _v("GPUFAIR_K8S", "false", "scheduler: admit and place gated Kubernetes training pods (deploy/README.md)", flag)
K8S_NAMESPACE = _v("GPUFAIR_K8S_NAMESPACE", _pod_namespace,
                   "scheduler with GPUFAIR_K8S: the namespace whose gated pods it admits", shown="its own namespace")
LEASE_TTL = _v("GPUFAIR_LEASE_TTL", "10", "seconds before a dead process's liveness keys and leadership expire",
               whole(2, 3600, "whole seconds"))
LOG_LEVEL = _v("GPUFAIR_LOG_LEVEL", "INFO", "log level: DEBUG, INFO, WARNING or ERROR",
              one_of("DEBUG", "INFO", "WARNING", "ERROR"))
PROMETHEUS_PORT = _v("GPUFAIR_PROMETHEUS_PORT", "", "serve Prometheus metrics on this port, on the host of GPUFAIR_LISTEN "
                     "(0 = any free port)", optional(whole(0, 65535, "a port")), shown="(off)")
OTLP_ENDPOINT = _v("OTEL_EXPORTER_OTLP_ENDPOINT", "", "send traces and metrics over OTLP/gRPC to this collector", shown="(off)")
TLS_CERT = _v("GPUFAIR_TLS_CERT", "", "PEM certificate: serve TLS on every service port", shown="(off)")
TLS_KEY = _v("GPUFAIR_TLS_KEY", "", "PEM private key for GPUFAIR_TLS_CERT", shown="(off)")
TLS_CLIENT_CA = _v("GPUFAIR_TLS_CLIENT_CA", "", "PEM CA: require client certificates (mutual TLS)", shown="(off)")
TLS_CA = _v("GPUFAIR_TLS_CA", "", "clients: PEM CA to verify servers", shown="(system)")
ADMIN_TOKEN = _v("GPUFAIR_ADMIN_TOKEN", "", "bearer token for admin and mutating RPCs", shown="(off)", secret=True)
JOB_TOKEN_SECRET = _v("GPUFAIR_JOB_TOKEN_SECRET", "", "secret that signs per-job tokens",
                      shown="(derived from admin token)", secret=True)
OPEN_READS = _v("GPUFAIR_OPEN_READS", "true", "allow read-only queries without a token", flag)
JOB_TOKEN = _v("GPUFAIR_JOB_TOKEN", "", "trainers: the job token from RegisterJob", shown="(none)", secret=True)
TLS = _v("GPUFAIR_TLS", "false", "trainers and CLI: use TLS with the system CAs", flag)
TLS_CLIENT_CERT = _v("GPUFAIR_TLS_CLIENT_CERT", "", "trainers: PEM client certificate for mutual TLS", shown="(off)")
TLS_CLIENT_KEY = _v("GPUFAIR_TLS_CLIENT_KEY", "", "trainers: PEM key of GPUFAIR_TLS_CLIENT_CERT", shown="(off)")
DISABLE = _v("GPUFAIR_DISABLE", "false", "trainers: no remote calls at all (plain DDP behaviour)", flag)
FALLBACK_DIR = _v("GPUFAIR_FALLBACK_DIR", tempfile.gettempdir, "trainers: where datasets go when no cache service answers",
                  shown="the temp dir")
JOB = _v("GPUFAIR_JOB", "", "trainers: the job id `gpufair submit` placed (it wins over the id the script passes)",
         shown="(none)")
EMU_DEVICES = _v("GPUFAIR_EMU_DEVICES", "", "trainers: the emulated GPU of each local rank, a list by LOCAL_RANK "
                 "(set by `gpufair submit`)", shown="(none)")
EMU_GPUS = _v("GPUFAIR_EMU_GPUS", "1", "emulated GPUs: a count like 4 or relative speeds like 1,1,0.5")
EMU_DIR = _v("GPUFAIR_EMU_DIR", _emu_dir, "emulated GPUs: shared lock directory", shown="/dev/shm/gpufair-emu-<uid>")

#: Every variable, in the order the README lists them.
VARS: tuple[Var, ...] = (
    ETCD, ETCD_ROOT, ETCD_USERNAME, ETCD_PASSWORD, LISTEN, METRICS_ADDR, SCHEDULER_ADDR, CACHE_ADDR, S3_ENDPOINT,
    S3_ACCESS_KEY, S3_SECRET_KEY, S3_SECURE, NODE, CACHE_DIR, CACHE_CAPACITY, CACHE_PART_SIZE, CACHE_CONCURRENCY,
    CACHE_ACTIVE_FETCHES, CACHE_RETRIES, POLICY, PRESET, PERIOD_S, MIN_CHANGE, JOB_LOST_S, JOB_RETENTION_S, JOB_RETENTION_MAX,
    K8S, K8S_NAMESPACE, LEASE_TTL, LOG_LEVEL, PROMETHEUS_PORT,
    OTLP_ENDPOINT, TLS_CERT, TLS_KEY, TLS_CLIENT_CA, TLS_CA, ADMIN_TOKEN, JOB_TOKEN_SECRET, OPEN_READS, JOB_TOKEN,
    TLS, TLS_CLIENT_CERT, TLS_CLIENT_KEY, DISABLE, FALLBACK_DIR, JOB, EMU_DEVICES, EMU_GPUS, EMU_DIR,
)


def markdown_table() -> str:
    """The README's configuration table, from `VARS`."""
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    rows += [f"| `{v.name}` | {v.default_text} | {v.meaning} |" for v in VARS]
    return "\n".join(rows) + "\n"
