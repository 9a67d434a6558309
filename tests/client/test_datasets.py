"""resolve_dataset: the cache when there is one, S3 directly otherwise, never a partial or escaped file."""

from __future__ import annotations

import io
import uuid
from pathlib import Path

import pytest

from gpufair.client.config import ClientConfig
from gpufair.client.datasets import resolve_dataset
from gpufair.common.errors import InvalidArgument, Unavailable
from gpufair.local import free_port

NO_CACHE = ClientConfig(cache_addr=f"127.0.0.1:{free_port()}")  # nothing listens there


@pytest.fixture
def s3_env(monkeypatch, s3_server, s3_client, tmp_path: Path):
    key_file = tmp_path / "secret"
    key_file.write_text(s3_server.secret_key)
    monkeypatch.setenv("GPUFAIR_S3_ENDPOINT", s3_server.endpoint)
    monkeypatch.setenv("GPUFAIR_S3_ACCESS_KEY", s3_server.access_key)
    monkeypatch.setenv("GPUFAIR_S3_SECRET_KEY_FILE", str(key_file))  # secrets as files, as in Kubernetes
    bucket = f"ds-{uuid.uuid4().hex[:8]}"
    s3_client.make_bucket(bucket)
    return bucket


def test_without_a_cache_service_the_prefix_is_read_from_s3(s3_env: str, s3_client, tmp_path: Path) -> None:
    for name, data in [("a.bin", b"1" * 10), ("sub/b.bin", b"2" * 20)]:
        s3_client.put_object(s3_env, f"train/{name}", io.BytesIO(data), len(data))
    path = resolve_dataset(f"s3://{s3_env}/train/", wait_s=1, fallback_dir=tmp_path, config=NO_CACHE)
    assert (path / "a.bin").read_bytes() == b"1" * 10 and (path / "sub" / "b.bin").read_bytes() == b"2" * 20
    # A second rank finds it done.
    assert resolve_dataset(f"s3://{s3_env}/train/", wait_s=1, fallback_dir=tmp_path, config=NO_CACHE) == path


def test_a_hostile_key_cannot_write_outside_the_download_dir(s3_env: str, s3_client, tmp_path: Path) -> None:
    s3_client.put_object(s3_env, "evil//tmp/escaped.txt", io.BytesIO(b"x"), 1)
    with pytest.raises(InvalidArgument, match="escape"):
        resolve_dataset(f"s3://{s3_env}/evil/", wait_s=1, fallback_dir=tmp_path / "dl", config=NO_CACHE)
    assert not Path("/tmp/escaped.txt").exists()
    assert [p.name for p in (tmp_path / "dl" / "gpufair-direct").iterdir() if not p.name.endswith(".lock")] == []


def test_s3_down_is_unavailable_and_leaves_no_partial_download(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUFAIR_S3_ENDPOINT", f"127.0.0.1:{free_port()}")
    with pytest.raises(Unavailable):
        resolve_dataset("s3://data-bucket/data/", wait_s=1, fallback_dir=tmp_path, config=NO_CACHE)
    assert [p.name for p in (tmp_path / "gpufair-direct").iterdir() if not p.name.endswith(".lock")] == []


def test_other_schemes_are_refused() -> None:
    with pytest.raises(InvalidArgument):
        resolve_dataset("gs://data-bucket/k", config=NO_CACHE)
