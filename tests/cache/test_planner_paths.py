"""safe_cache_path keeps every dataset inside the cache directory."""

from __future__ import annotations

import os

import pytest

from gpufair.cache.paths import safe_cache_path
from gpufair.common.errors import InvalidArgument


def test_maps_scheme_bucket_and_key_under_the_root(tmp_path) -> None:
    assert safe_cache_path(tmp_path, "s3://bucket/a/b.tar") == tmp_path.resolve() / "s3" / "bucket" / "a" / "b.tar"
    assert safe_cache_path(tmp_path, "minio://bucket/prefix/") == tmp_path.resolve() / "minio" / "bucket" / "prefix"


@pytest.mark.parametrize("uri", [
    "s3://bucket/../../etc/passwd", "s3://bucket/a/./b", "s3:///etc/passwd", "/etc/passwd",
    "s3://bucket/%2e%2e/x", "s3://bucket/a%2F..%2Fb", "s3://b/a\\..\\..\\x", "file:///etc/passwd",
    "gs://bucket/key", "s3://..", "s3://b//x", "s3://b/a\x00b", "", "s3://b/" + "x" * 300,
])
def test_refuses_uris_that_could_escape(tmp_path, uri: str) -> None:
    with pytest.raises(InvalidArgument):
        safe_cache_path(tmp_path, uri)


def test_refuses_a_symlink_inside_the_cache_that_points_out(tmp_path) -> None:
    root = tmp_path / "cache"
    (root / "s3").mkdir(parents=True)
    os.symlink(tmp_path, root / "s3" / "evil")
    with pytest.raises(InvalidArgument):
        safe_cache_path(root, "s3://evil/x")


def test_never_leaves_the_root_for_any_segment(tmp_path) -> None:
    from hypothesis import given, settings, strategies as st

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=5))
    def check(parts: list[str]) -> None:
        try:
            path = safe_cache_path(tmp_path, "s3://" + "/".join(parts))
        except InvalidArgument:
            return
        resolved = path.resolve()
        assert tmp_path.resolve() in resolved.parents

    check()
