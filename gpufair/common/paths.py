"""Joining object keys under a local directory, safely.

Object keys come from buckets other people can write to, so they are hostile
until proven otherwise: an absolute key, `..`, empty segments, backslashes or
control characters could otherwise write outside the directory. The node
cache (`gpufair.cache.node`) and the trainer's direct-S3 fallback
(`gpufair.client.datasets`) both place files with `safe_join`.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpufair.common.errors import InvalidArgument

MAX_SEGMENT = 255
MAX_TOTAL = 1024


def check_key(rel: str) -> list[str]:
    """The segments of a relative object key; InvalidArgument if it could escape.

    Messages say "would escape the directory" so callers can tell this refusal apart.
    """
    if not isinstance(rel, str) or not rel or len(rel) > MAX_TOTAL:
        raise InvalidArgument(f"object key {rel!r} must be 1-{MAX_TOTAL} characters: it would escape the directory")
    if rel.startswith("/") or "\\" in rel:
        raise InvalidArgument(f"object key {rel!r} is absolute or has a backslash: it would escape the directory")
    parts = rel.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise InvalidArgument(f"object key {rel!r} has an empty, '.' or '..' segment: it would escape the directory")
        if any(ord(c) < 32 or ord(c) == 127 for c in part):
            raise InvalidArgument(f"object key {rel!r} has a control character: it would escape the directory")
        if len(part.encode("utf-8", "surrogatepass")) > MAX_SEGMENT:
            raise InvalidArgument(f"object key {rel!r} has a segment longer than {MAX_SEGMENT} bytes: it would escape the directory")
    return parts


def safe_join(root: str | os.PathLike[str], rel: str) -> Path:
    """`root / rel`, refusing anything that would land outside `root` (symlinks included)."""
    base = Path(root)
    out = base.joinpath(*check_key(rel))
    resolved, top = out.resolve(), base.resolve()
    if resolved != top and top not in resolved.parents:
        raise InvalidArgument(f"object key {rel!r} resolves outside {base}: it would escape the directory")
    return out
