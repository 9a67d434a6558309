"""Writing an output file whole or not at all."""

from __future__ import annotations

import stat

import pytest

from gpufair.common.files import write_whole


def test_a_file_is_written_whole_and_readable_by_all(tmp_path):
    target = tmp_path / "out.csv"
    write_whole(target, "a,b\n1,2\n")
    assert target.read_text() == "a,b\n1,2\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "out.csv"
    target.write_text("old\n")
    with pytest.raises(TypeError):
        write_whole(target, b"not text")  # type: ignore[arg-type]
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]
