"""Node cache configuration: one frozen dataclass, read once from the environment."""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path

from gpufair.common.config import S3Config
from gpufair.common.errors import InvalidArgument
from gpufair.common.keys import check_segment

MiB = 1024 * 1024
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
          "t": 1000**4, "tb": 1000**4, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str, what: str = "size") -> int:
    """Parse `10GiB`, `500MB`, `1048576` into bytes."""
    m = _SIZE.match(text)
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _UNITS:
        raise InvalidArgument(f"{what} {text!r} is not a size: use e.g. 1048576, 500MB or 10GiB")
    return int(float(m.group(1)) * _UNITS[unit])


@dataclass(frozen=True)
class NodeCacheConfig:
    """Settings of one node's cache.

    Environment (defaults in brackets): GPUFAIR_CACHE_DIR [/var/cache/gpufair],
    GPUFAIR_CACHE_CAPACITY [10GiB], GPUFAIR_NODE [hostname],
    GPUFAIR_CACHE_PART_SIZE [8MiB], GPUFAIR_CACHE_CONCURRENCY [8 parts in flight],
    GPUFAIR_CACHE_ACTIVE_FETCHES [4 datasets at once], GPUFAIR_CACHE_RETRIES [2],
    GPUFAIR_S3_ENDPOINT [127.0.0.1:9000], GPUFAIR_S3_ACCESS_KEY, GPUFAIR_S3_SECRET_KEY
    (or GPUFAIR_S3_SECRET_KEY_FILE), GPUFAIR_S3_SECURE [0].
    """

    cache_dir: Path
    capacity_bytes: int
    node: str = "local"
    part_size: int = 8 * MiB
    max_concurrency: int = 8
    max_active_fetches: int = 4
    chunk_size: int = 1 * MiB
    retries: int = 2
    verify_etag: bool = True
    s3_endpoint: str = "127.0.0.1:9000"
    s3_access_key: str = ""
    s3_secret_key: str = ""
    s3_secure: bool = False

    def __post_init__(self) -> None:
        check_segment("node", self.node)
        if self.capacity_bytes <= 0:
            raise InvalidArgument(f"cache capacity must be positive, got {self.capacity_bytes}")
        if self.part_size < 64 * 1024:
            raise InvalidArgument(f"part size must be at least 64 KiB, got {self.part_size}")
        if not 1 <= self.max_concurrency <= 256 or not 1 <= self.max_active_fetches <= 64:
            raise InvalidArgument("cache concurrency must be 1-256 parts and 1-64 active fetches")
        if not 1 <= self.chunk_size <= self.part_size or self.retries < 0:
            raise InvalidArgument("chunk size must be 1..part_size and retries >= 0")

    def __repr__(self) -> str:  # never print the secret key
        return f"NodeCacheConfig(cache_dir={str(self.cache_dir)!r}, node={self.node!r}, capacity={self.capacity_bytes})"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "NodeCacheConfig":
        """Build from GPUFAIR_* variables (see the class docstring)."""
        e = dict(os.environ if env is None else env)
        s3 = S3Config.from_env(e)  # the same S3 settings (and secret files) every process reads
        return cls(
            cache_dir=Path(e.get("GPUFAIR_CACHE_DIR", "/var/cache/gpufair")),
            capacity_bytes=parse_size(e.get("GPUFAIR_CACHE_CAPACITY", "10GiB"), "GPUFAIR_CACHE_CAPACITY"),
            node=e.get("GPUFAIR_NODE") or socket.gethostname().split(".")[0] or "local",
            part_size=parse_size(e.get("GPUFAIR_CACHE_PART_SIZE", "8MiB"), "GPUFAIR_CACHE_PART_SIZE"),
            max_concurrency=_int(e, "GPUFAIR_CACHE_CONCURRENCY", 8),
            max_active_fetches=_int(e, "GPUFAIR_CACHE_ACTIVE_FETCHES", 4),
            retries=_int(e, "GPUFAIR_CACHE_RETRIES", 2),
            s3_endpoint=s3.endpoint,
            s3_access_key=s3.access_key,
            s3_secret_key=s3.secret_key,
            s3_secure=s3.secure,
        )


def _int(env: dict[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidArgument(f"{name}={raw!r} is not an integer") from None
