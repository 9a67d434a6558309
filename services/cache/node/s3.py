"""Blocking S3 access through the `minio` SDK: manifests, ranged part reads, error mapping.

Everything here blocks and runs in the cache's thread pool, never on the event loop.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Protocol

import urllib3
from minio import Minio
from minio.error import InvalidResponseError, S3Error, ServerError

from gpufair.common.errors import FailedPrecondition, GpufairError, InvalidArgument, NotFound, Unavailable
from gpufair.common.uris import DatasetUri

from .config import NodeCacheConfig
from .errors import IntegrityError, ObjectChanged
from .status import Manifest, ObjectSpec

logger = logging.getLogger(__name__)

_AUTH_CODES = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled"}


class S3Client(Protocol):
    """The part of `minio.Minio` the cache uses (tests wrap it to count or corrupt)."""

    def stat_object(self, bucket_name: str, object_name: str) -> Any: ...
    def list_objects(self, bucket_name: str, prefix: str | None = None, recursive: bool = False) -> Any: ...
    def get_object(self, bucket_name: str, object_name: str, offset: int = 0, length: int = 0,
                   request_headers: dict[str, str] | None = None) -> Any: ...


class FetchCancelled(Exception):
    """A part read stopped because its fetch was cancelled."""


def make_client(config: NodeCacheConfig) -> Minio:
    """A Minio client with a connection pool sized to the part concurrency and short retries."""
    http = urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=5, read=60),
        maxsize=config.max_concurrency + 2,
        retries=urllib3.Retry(total=2, backoff_factor=0.2, status_forcelist=[500, 502, 503, 504]),
    )
    return Minio(config.s3_endpoint, access_key=config.s3_access_key, secret_key=config.s3_secret_key,
                 secure=config.s3_secure, http_client=http)


@contextlib.contextmanager
def s3_errors(endpoint: str, what: str) -> Iterator[None]:
    """Turn SDK and network exceptions into domain errors that name the endpoint and object."""
    try:
        yield
    except (GpufairError, FetchCancelled):
        raise
    except S3Error as exc:
        if exc.code in ("NoSuchKey", "NoSuchBucket"):
            raise NotFound(f"{what} does not exist on S3 endpoint {endpoint} ({exc.code})") from None
        if exc.code == "PreconditionFailed":
            raise ObjectChanged(f"{what} changed on S3 while it was being fetched") from None
        if exc.code in _AUTH_CODES:
            raise FailedPrecondition(f"S3 endpoint {endpoint} refused access to {what} ({exc.code})") from None
        raise Unavailable(f"S3 endpoint {endpoint} failed on {what}: {exc.code}") from None
    except ValueError as exc:  # the SDK's own name checks
        raise InvalidArgument(f"{what}: {exc}") from None
    except (ServerError, InvalidResponseError) as exc:
        raise Unavailable(f"S3 endpoint {endpoint} failed on {what}: {type(exc).__name__}") from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise Unavailable(f"S3 endpoint {endpoint} unreachable while reading {what}: {reason}") from None


@dataclass(frozen=True)
class S3Source:
    """A client plus the endpoint name used in error messages."""

    client: S3Client
    endpoint: str

    def manifest(self, ds: DatasetUri) -> Manifest:
        """Stat one object or list a prefix; fixes sizes and ETags before any byte moves."""
        with s3_errors(self.endpoint, ds.canonical):
            if not ds.is_prefix:
                st = self.client.stat_object(ds.bucket, ds.key)
                name = PurePosixPath(ds.key).name
                objs = (ObjectSpec(ds.key, name, int(st.size), _etag(st.etag)),)
                return Manifest(ds.canonical, ds.bucket, False, objs)
            found = []
            for o in self.client.list_objects(ds.bucket, prefix=ds.key or None, recursive=True):
                if o.is_dir or o.object_name.endswith("/"):
                    continue  # folder markers carry no data
                rel = o.object_name[len(ds.key):]
                found.append(ObjectSpec(o.object_name, rel, int(o.size or 0), _etag(o.etag)))
        if not found:
            raise NotFound(f"{ds.canonical} matches no objects on S3 endpoint {self.endpoint}")
        _check_layout(ds.canonical, found)
        return Manifest(ds.canonical, ds.bucket, True, tuple(sorted(found, key=lambda o: o.key)))

    def read_part(self, bucket: str, obj: ObjectSpec, offset: int, length: int, path: str,
                  chunk: int, cancel: threading.Event) -> bytes:
        """GET bytes [offset, offset+length) of `obj` into `path` at the same offset; returns their MD5.

        If-Match pins the ETag from the manifest, and the response ETag is checked
        too, so a replaced object can never mix old and new bytes.
        """
        what = f"s3://{bucket}/{obj.key}"
        whole = offset == 0 and length == obj.size
        with s3_errors(self.endpoint, what):
            resp = self.client.get_object(bucket, obj.key, offset=0 if whole else offset,
                                          length=0 if whole else length,
                                          request_headers={"If-Match": f'"{obj.etag}"'})
            try:
                got = _etag(resp.headers.get("ETag", ""))
                if got and got != obj.etag:
                    raise ObjectChanged(f"{what} changed on S3 while it was being fetched")
                return _copy_body(resp, path, offset, length, chunk, cancel, what)
            finally:
                resp.close()
                resp.release_conn()


def _copy_body(resp: Any, path: str, offset: int, length: int, chunk: int,
               cancel: threading.Event, what: str) -> bytes:
    md5 = hashlib.md5(usedforsecurity=False)
    fd = os.open(path, os.O_WRONLY)
    try:
        pos = offset
        while True:
            if cancel.is_set():
                raise FetchCancelled(what)
            buf = resp.read(chunk)
            if not buf:
                break
            if pos + len(buf) > offset + length:
                raise IntegrityError(f"{what}: S3 sent more bytes than the object's size")
            md5.update(buf)
            view = memoryview(buf)
            while view:  # pwrite may write less than asked
                n = os.pwrite(fd, view, pos)
                view, pos = view[n:], pos + n
    finally:
        os.close(fd)
    if pos != offset + length:
        raise IntegrityError(f"{what}: got {pos - offset} bytes for a {length}-byte part at offset {offset}")
    return md5.digest()


def _etag(raw: str | None) -> str:
    return (raw or "").strip().strip('"')


def _check_layout(uri: str, objs: list[ObjectSpec]) -> None:
    """Refuse keys that cannot become files (escapes, or a key that is also another key's folder)."""
    files = {o.rel for o in objs}
    for o in objs:
        parts = o.rel.split("/")
        if any(p in ("", ".", "..") for p in parts) or "\x00" in o.rel:
            raise InvalidArgument(f"{uri}: object key {o.key!r} would escape the cache directory")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in files:
                raise InvalidArgument(f"{uri}: key {o.key!r} needs {'/'.join(parts[:i])!r} as a folder, "
                                      "but that is also an object")
