"""Mapping dataset URIs to paths inside the node cache directory, safely.

A URI comes from user-written pipeline YAML or an RPC, so it is hostile
until proven otherwise: `..`, absolute paths, backslashes, control
characters or percent-encoded separators could otherwise write outside the
cache directory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote

from gpufair.common.errors import InvalidArgument

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]{0,31})://(.*)$", re.S)
_ALLOWED_SCHEMES = frozenset({"s3", "s3a", "s3n", "minio"})
_MAX_SEGMENT = 255
_MAX_TOTAL = 1024


def _segments(uri: str, rest: str) -> list[str]:
    if rest.startswith("/"):
        raise InvalidArgument(f"dataset URI {uri!r}: absolute path after the scheme (empty bucket)")
    parts = rest.split("/")
    if parts and parts[-1] == "":
        parts.pop()  # a trailing slash marks a prefix
    if not parts or not parts[0]:
        raise InvalidArgument(f"dataset URI {uri!r}: no bucket")
    for part in parts:
        decoded = unquote(part)
        if part == "" or decoded in {".", ".."}:
            raise InvalidArgument(f"dataset URI {uri!r}: empty, '.' or '..' path segment")
        if "/" in decoded or "\\" in decoded:
            raise InvalidArgument(f"dataset URI {uri!r}: encoded or backslash path separator")
        if any(ord(c) < 32 or ord(c) == 127 for c in decoded):
            raise InvalidArgument(f"dataset URI {uri!r}: control character in the path")
        if len(part.encode("utf-8", "surrogatepass")) > _MAX_SEGMENT:
            raise InvalidArgument(f"dataset URI {uri!r}: a path segment is longer than {_MAX_SEGMENT} bytes")
    return parts


def safe_cache_path(cache_root: str | os.PathLike[str], uri: str) -> Path:
    """Where dataset `uri` lives under `cache_root`: `<root>/<scheme>/<bucket>/<key>`.

    Only object-store URIs (s3://, s3a://, minio://) are accepted. Raises
    InvalidArgument for anything that could name a path outside the root,
    including through symlinks already inside it.
    """
    if not isinstance(uri, str) or not uri:
        raise InvalidArgument(f"dataset URI must be a non-empty string, got {uri!r}")
    if len(uri) > _MAX_TOTAL:
        raise InvalidArgument(f"dataset URI longer than {_MAX_TOTAL} characters")
    m = _SCHEME.match(uri)
    if not m:
        raise InvalidArgument(f"dataset URI {uri!r}: expected scheme://bucket/key")
    scheme = m.group(1).lower()
    if scheme not in _ALLOWED_SCHEMES:
        raise InvalidArgument(f"dataset URI {uri!r}: scheme '{scheme}' is not cached (use s3:// or minio://)")
    parts = _segments(uri, m.group(2))
    root = Path(cache_root).resolve()
    candidate = root.joinpath(scheme, *parts)
    resolved = candidate.resolve()
    if resolved != root and root not in resolved.parents:
        raise InvalidArgument(f"dataset URI {uri!r}: resolves outside the cache directory")
    return candidate
