"""Node cache configuration: one frozen dataclass, read once from the environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpufair.common import env
from gpufair.common.config import S3Config
from gpufair.common.errors import InvalidArgument
from gpufair.common.keys import check_segment

MiB = 1024 * 1024


def parse_size(text: str, what: str = "size") -> int:
    """Parse `10GiB`, `500MB`, `1048576` into bytes (InvalidArgument otherwise)."""
    try:
        return env.parse_size(text, what)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None


@dataclass(frozen=True)
class NodeCacheConfig:
    """Settings of one node's cache (the GPUFAIR_CACHE_*, GPUFAIR_NODE and
    GPUFAIR_S3_* variables of `gpufair.common.env`)."""

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
    def from_env(cls, e: Mapping[str, str] | None = None) -> "NodeCacheConfig":
        """Build from the environment (InvalidArgument naming a malformed variable)."""
        try:
            s3 = S3Config.from_env(e)  # the same S3 settings (and secret files) every process reads
            return cls(
                cache_dir=Path(env.CACHE_DIR.read(e)),
                capacity_bytes=env.CACHE_CAPACITY.read(e),
                node=env.NODE.read(e),
                part_size=env.CACHE_PART_SIZE.read(e),
                max_concurrency=env.CACHE_CONCURRENCY.read(e),
                max_active_fetches=env.CACHE_ACTIVE_FETCHES.read(e),
                retries=env.CACHE_RETRIES.read(e),
                s3_endpoint=s3.endpoint,
                s3_access_key=s3.access_key,
                s3_secret_key=s3.secret_key,
                s3_secure=s3.secure,
            )
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
