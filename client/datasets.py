"""Dataset resolution: a node-local path for an `s3://` / `minio://` dataset URI.

Asks this node's cache service first (it may already hold the dataset because
the pipeline planner prefetched it). Without a cache service it downloads the
dataset straight from S3 into a local directory, the way a trainer would have
without gpufair. Never leaves a partial download visible.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import tempfile
from pathlib import Path, PurePosixPath

import grpc

from gpufair.api.cache.v1 import cache_service_pb2 as pb
from gpufair.api.cache.v1 import cache_service_pb2_grpc as pb_grpc
from gpufair.client.config import ClientConfig
from gpufair.common import env
from gpufair.common.channels import sync_channel, token_metadata
from gpufair.common.config import S3Config
from gpufair.common.errors import FailedPrecondition, GpufairError, InvalidArgument, Unavailable
from gpufair.common.paths import safe_join
from gpufair.common.uris import parse_dataset_uri

logger = logging.getLogger(__name__)


def _split(uri: str) -> tuple[str, str]:
    """(bucket, key) of an s3:// or minio:// URI, parsed by the table the node cache uses."""
    try:
        ds = parse_dataset_uri(uri)
    except FailedPrecondition as exc:  # a well-formed URI of a store we cannot read (gs://, ...)
        raise InvalidArgument(str(exc)) from None
    return ds.bucket, ds.key


def _from_cache(uri: str, cfg: ClientConfig, wait_s: float) -> Path | None:
    try:
        with sync_channel(cfg.cache_addr, tls_ca=cfg.tls_ca, tls=cfg.tls, token=cfg.token, client_cert=cfg.client_cert,
                          client_key=cfg.client_key) as ch:
            res = pb_grpc.CacheServiceStub(ch).Resolve(pb.ResolveRequest(uri=uri, fetch=True, wait_s=wait_s),
                                                       metadata=token_metadata(cfg.token), timeout=wait_s + 10)
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND):
            raise InvalidArgument(f"{uri}: {exc.details()}") from None
        logger.info("cache service unavailable (%s); reading %s from S3", code, uri)
        return None
    if res.entry.state == pb.ENTRY_STATE_CACHED and res.entry.local_path:
        return Path(res.entry.local_path)
    logger.info("cache has %s in state %d (%s); reading from S3", uri, res.entry.state, res.entry.error)
    return None


def _download(client, bucket: str, key: str, staging: Path) -> None:
    """Every object of the dataset into `staging`, each key placed with `safe_join`."""
    if key and not key.endswith("/"):
        client.fget_object(bucket, key, str(staging / PurePosixPath(key).name))
        return
    for obj in client.list_objects(bucket, prefix=key or None, recursive=True):
        if obj.is_dir or obj.object_name.endswith("/"):
            continue
        target = safe_join(staging, obj.object_name[len(key):])  # hostile keys cannot escape
        target.parent.mkdir(parents=True, exist_ok=True)
        client.fget_object(bucket, obj.object_name, str(target))


def _from_s3(uri: str, dest_root: Path) -> Path:
    from minio import Minio  # only when no cache service answers: importing the helper stays light

    bucket, key = _split(uri)
    s3 = S3Config.from_env()
    dest_root.mkdir(parents=True, exist_ok=True)
    final = dest_root / f"{bucket}-{key.strip('/').replace('/', '_') or 'root'}"
    result = final / PurePosixPath(key).name if key and not key.endswith("/") else final
    # Ranks on one node share the download: one fetches under the lock, the rest find it done.
    with open(dest_root / f".{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if final.exists():
            return result
        staging = Path(tempfile.mkdtemp(prefix=".partial-", dir=dest_root))
        try:
            client = Minio(s3.endpoint, access_key=s3.access_key or None, secret_key=s3.secret_key or None, secure=s3.secure)
            _download(client, bucket, key, staging)
            staging.rename(final)
        except GpufairError:
            raise
        except Exception as exc:  # noqa: BLE001 - S3Error, urllib3 and OS errors all mean "could not read it"
            code = getattr(exc, "code", None)
            if code:
                raise FailedPrecondition(f"{uri}: S3 refused the read ({code})") from None
            raise Unavailable(f"{uri}: S3 endpoint {s3.endpoint} unreachable ({type(exc).__name__})") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)  # gone after the rename; removes partial data otherwise
    return result


def resolve_dataset(uri: str, *, wait_s: float = 300.0, fallback_dir: str | os.PathLike[str] | None = None,
                    config: ClientConfig | None = None) -> Path:
    """A local file or directory holding `uri`'s data: from the cache service, else S3 directly."""
    _split(uri)
    cfg = config or ClientConfig.from_env()
    if cfg.enabled:
        path = _from_cache(uri, cfg, wait_s)
        if path is not None:
            return path
    root = Path(fallback_dir or env.FALLBACK_DIR.read()) / "gpufair-direct"
    return _from_s3(uri, root)
