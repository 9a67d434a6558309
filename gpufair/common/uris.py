"""Dataset URIs: which schemes the cache fetches, parsing, validation, entry ids.

The one table of fetchable and known-unfetchable schemes. The node cache, the
pipeline planner and the trainer's dataset helper all decide with it, so a
URI the planner calls fetchable is one the cache accepts (pure: no I/O).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from gpufair.common.errors import FailedPrecondition, InvalidArgument

#: Schemes the node cache pulls itself, through its S3/MinIO client (s3a and
#: s3n are Hadoop's names for the same objects).
FETCHABLE_SCHEMES = frozenset({"s3", "s3a", "s3n", "minio"})

_S3_CLIENT = "not reachable through the cache's S3 client"
_NOT_A_STORE = "not an object store the cache manages"
_ON_A_VOLUME = "the data already lives on a volume"

#: Storage schemes we recognise but cannot fetch, and why.
UNFETCHABLE_REASONS = {
    "gs": f"Google Cloud Storage: {_S3_CLIENT}",
    "gcs": f"Google Cloud Storage: {_S3_CLIENT}",
    "http": f"plain HTTP download: {_NOT_A_STORE}",
    "https": f"HTTPS download: {_NOT_A_STORE}",
    "hdfs": f"HDFS: {_NOT_A_STORE}",
    "webhdfs": f"HDFS: {_NOT_A_STORE}",
    "abfs": f"Azure storage: {_S3_CLIENT}",
    "abfss": f"Azure storage: {_S3_CLIENT}",
    "az": f"Azure storage: {_S3_CLIENT}",
    "azure": f"Azure storage: {_S3_CLIENT}",
    "wasb": f"Azure storage: {_S3_CLIENT}",
    "wasbs": f"Azure storage: {_S3_CLIENT}",
    "oss": "Alibaba OSS: not configured as an S3 endpoint of the cache",
    "cos": "IBM COS: not configured as an S3 endpoint of the cache",
    "file": "a local file path on the pod: nothing to fetch",
    "pvc": f"a PersistentVolumeClaim mount: {_ON_A_VOLUME}",
    "git": "a git repository, not a dataset in object storage",
    "ftp": f"FTP download: {_NOT_A_STORE}",
    "nfs": f"an NFS volume mount: {_ON_A_VOLUME}",
    "azurefile": f"an Azure Files volume mount: {_ON_A_VOLUME}",
}

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
        """The URI with `minio://`, `s3a://` and `s3n://` folded into `s3://` (same bytes, same cache entry)."""
        return f"s3://{self.bucket}/{self.key}"

    @property
    def entry_id(self) -> str:
        return entry_id_for(self.canonical)


def entry_id_for(canonical_uri: str) -> str:
    """Stable, key-segment-safe id of a dataset (hex of a SHA-256 prefix)."""
    return hashlib.sha256(canonical_uri.encode()).hexdigest()[:32]


def parse_dataset_uri(uri: str) -> DatasetUri:
    """Parse `s3://bucket/key`, `s3://bucket/prefix/` or `minio://...` (also s3a, s3n).

    Raises InvalidArgument for malformed URIs and FailedPrecondition for
    well-formed URIs of stores the cache cannot fetch from (gs://, ...).
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
        if scheme in UNFETCHABLE_REASONS:
            raise FailedPrecondition(f"cannot fetch {scheme}:// here ({UNFETCHABLE_REASONS[scheme]}): "
                                     "the node cache reads s3:// and minio:// only")
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
