"""Checking a fetched object against its S3 size and ETag.

What is verified (recorded per entry as `verified`):
- "md5": single-part uploads, whose ETag is the MD5 of the content.
- "multipart-md5": multipart uploads (ETag `<md5 of part md5s>-N`) when a
  plausible upload part size reproduces the ETag (our download part size, the
  SDK/CLI defaults 5/8/16/... MiB, or size/N rounded up to a MiB).
- "size": the ETag is not an MD5 (SSE-KMS, unknown part size) or verification
  is switched off; only the byte count is checked then.
A mismatch on an MD5-shaped single-part ETag is an IntegrityError.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
from collections.abc import Sequence

from .errors import IntegrityError
from .status import ObjectSpec

logger = logging.getLogger(__name__)

MiB = 1024 * 1024
_MD5 = re.compile(r"^[0-9a-f]{32}$")
_MULTI = re.compile(r"^([0-9a-f]{32})-(\d+)$")
_COMMON_PART_MIB = (5, 8, 10, 15, 16, 25, 32, 50, 64, 100, 128, 256, 512)
_MAX_EXTRA_PASSES = 3


def verify_object(path: str, obj: ObjectSpec, what: str, part_size: int,
                  part_digests: Sequence[bytes], check_etag: bool = True) -> str:
    """Raise IntegrityError unless `path` holds `obj`; return how it was verified."""
    size = os.stat(path).st_size
    if size != obj.size:
        raise IntegrityError(f"{what}: fetched {size} bytes, S3 says {obj.size}")
    etag = obj.etag.lower()
    if not check_etag:
        return "size"
    if _MD5.match(etag):
        digest = part_digests[0] if len(part_digests) == 1 else file_md5s(path, obj.size)[0]
        if digest.hex() != etag:
            raise IntegrityError(f"{what}: content MD5 {digest.hex()} does not match ETag {etag}")
        return "md5"
    m = _MULTI.match(etag)
    if not m:
        return "size"
    n = int(m.group(2))
    if len(part_digests) == n and math.ceil(obj.size / part_size) == n and _multipart(part_digests, n) == etag:
        return "multipart-md5"
    for cand in candidate_part_sizes(obj.size, n, exclude=part_size)[:_MAX_EXTRA_PASSES]:
        if _multipart(file_md5s(path, cand), n) == etag:
            return "multipart-md5"
    logger.info("%s: multipart ETag %s with unknown part size; verified size only", what, etag)
    return "size"


def candidate_part_sizes(size: int, n: int, exclude: int = 0) -> list[int]:
    """Upload part sizes that would split `size` bytes into exactly `n` parts."""
    cands = [p * MiB for p in _COMMON_PART_MIB]
    cands.append(math.ceil(size / n / MiB) * MiB)
    out: list[int] = []
    for p in cands:
        if p != exclude and p not in out and math.ceil(size / p) == n:
            out.append(p)
    return out


def file_md5s(path: str, part_size: int) -> list[bytes]:
    """MD5 of each `part_size` slice of the file (one slice = the whole file's MD5)."""
    digests: list[bytes] = []
    with open(path, "rb", buffering=0) as f:
        while True:
            h = hashlib.md5(usedforsecurity=False)
            left = part_size
            while left:
                buf = f.read(min(left, MiB))
                if not buf:
                    break
                h.update(buf)
                left -= len(buf)
            if left == part_size and digests:
                break
            digests.append(h.digest())
            if left:
                break
    return digests


def _multipart(digests: Sequence[bytes], n: int) -> str:
    return f"{hashlib.md5(b''.join(digests), usedforsecurity=False).hexdigest()}-{n}"
