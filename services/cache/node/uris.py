"""Dataset URIs: parsing, validation, stable entry ids and safe local paths."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from gpufair.cache.paths import safe_join
from gpufair.common.errors import FailedPrecondition, InvalidArgument

FETCHABLE_SCHEMES = ("s3", "s3a", "minio")
_KNOWN_UNFETCHABLE = ("gs", "gcs", "az", "abfs", "abfss", "wasb", "wasbs", "hdfs", "http", "https", "file", "oss")
_URI = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)$")
# S3 bucket naming rules (lower case, 3-63 chars, no leading/trailing dot or dash).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
MAX_URI_LEN = 2048


@dataclass(frozen=True)
class DatasetUri:
    """A dataset: one object (`key`) or every object under a prefix (key ends with '/')."""

    scheme: str
    bucket: str
    key: str

    @property
    def is_prefix(self) -> bool:
        return self.key == "" or self.key.endswith("/")

    @property
    def canonical(self) -> str:
        """The URI with `minio://` and `s3a://` folded into `s3://` (same bytes, same cache entry)."""
        return f"s3://{self.bucket}/{self.key}"

    @property
    def entry_id(self) -> str:
        return entry_id_for(self.canonical)


def entry_id_for(canonical_uri: str) -> str:
    """Stable, key-segment-safe id of a dataset (hex of a SHA-256 prefix)."""
    return hashlib.sha256(canonical_uri.encode()).hexdigest()[:32]


def parse_dataset_uri(uri: str) -> DatasetUri:
    """Parse `s3://bucket/key`, `s3://bucket/prefix/` or `minio://...`.

    Raises InvalidArgument for malformed URIs and FailedPrecondition for
    well-formed URIs of stores this service cannot fetch from (gs://, ...).
    """
    if not isinstance(uri, str) or not uri:
        raise InvalidArgument("dataset uri is empty")
    if len(uri) > MAX_URI_LEN:
        raise InvalidArgument(f"dataset uri is {len(uri)} characters long, the limit is {MAX_URI_LEN}")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in uri):
        raise InvalidArgument(f"dataset uri {uri!r} contains control characters")
    m = _URI.match(uri)
    if not m:
        raise InvalidArgument(f"dataset uri {uri!r} has no scheme: expected s3://bucket/key or minio://bucket/key")
    scheme = m.group("scheme").lower()
    if scheme not in FETCHABLE_SCHEMES:
        if scheme in _KNOWN_UNFETCHABLE:
            raise FailedPrecondition(f"cannot fetch {scheme}:// here: the node cache reads s3:// and minio:// only")
        raise InvalidArgument(f"dataset uri {uri!r} has unknown scheme {scheme!r}: expected s3:// or minio://")
    bucket, _, key = m.group("rest").partition("/")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise InvalidArgument(f"dataset uri {uri!r} has invalid bucket name {bucket!r}")
    _check_key(uri, key)
    return DatasetUri(scheme, bucket, key)


def _check_key(uri: str, key: str) -> None:
    if key.startswith("/"):
        raise InvalidArgument(f"dataset uri {uri!r}: the key must not start with '/'")
    parts = key.split("/")
    body = parts[:-1] if key.endswith("/") else parts
    if key and any(p in ("", ".", "..") for p in body):
        raise InvalidArgument(f"dataset uri {uri!r}: the key has an empty, '.' or '..' path segment")


def safe_relpath(root: Path, rel: str) -> Path:
    """`root / rel` for an object key relative to its dataset; see `gpufair.cache.paths.safe_join`."""
    return safe_join(root, rel)