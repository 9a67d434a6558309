"""safe_join keeps every object key inside its directory."""

from __future__ import annotations

import os

import pytest

from gpufair.common.paths import safe_join
from gpufair.common.errors import InvalidArgument


def test_joins_relative_keys_under_the_root(tmp_path) -> None:
    assert safe_join(tmp_path, "a/b.tar") == tmp_path / "a" / "b.tar"
    assert safe_join(tmp_path, "%2e%2e") == tmp_path / "%2e%2e"  # a literal name, not a parent reference


@pytest.mark.parametrize("rel", [
    "../../etc/passwd", "a/./b", "/etc/passwd", "a//b", "a/", "", "a\\..\\..\\x", "a\x00b", "x" * 300, "a/" * 600,
])
def test_refuses_keys_that_could_escape(tmp_path, rel: str) -> None:
    with pytest.raises(InvalidArgument):
        safe_join(tmp_path, rel)


def test_refuses_a_symlink_inside_the_root_that_points_out(tmp_path) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    os.symlink(tmp_path, root / "evil")
    with pytest.raises(InvalidArgument):
        safe_join(root, "evil/x")


def test_never_leaves_the_root_for_any_key(tmp_path) -> None:
    from hypothesis import given, settings, strategies as st

    @settings(max_examples=300, deadline=None)
    @given(st.text(min_size=1, max_size=40))
    def check(rel: str) -> None:
        try:
            path = safe_join(tmp_path, rel)
        except InvalidArgument:
            return
        assert tmp_path.resolve() in path.resolve().parents

    check()
