"""What `gpufair submit` shows of torchrun's stderr: the trainers' output, not torchrun's
own tracebacks; and the failed rank's exit code (recorded torchrun 2.x output)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufair.client.cli.launchlog import TorchrunStderr, exit_status

FIXTURES = Path(__file__).parent / "fixtures"


def shown(name: str) -> tuple[list[str], TorchrunStderr]:
    seen, out = TorchrunStderr(), []
    for line in (FIXTURES / name).read_text().splitlines():
        out += seen.feed(line)
    return out + seen.close(), seen


def test_a_rank_that_exits_2_shows_its_own_output_and_submit_exits_2():
    out, seen = shown("torchrun_child_exit2.txt")
    assert out == ["boom"]  # the script's stderr; none of torchrun's 34 lines
    assert (seen.exit_code, seen.failed_rank, seen.signalled) == (2, 0, False)
    assert exit_status(1, seen) == 2


def test_a_rank_that_raises_keeps_its_traceback_and_drops_torchruns():
    out, seen = shown("torchrun_child_raises.txt")
    assert out == ["Traceback (most recent call last):", '  File "/job/t.py", line 5, in <module>',
                   '    raise ValueError("bad value")', "ValueError: bad value"]
    assert exit_status(1, seen) == 1


def test_a_signalled_torchrun_shows_its_log_lines_but_not_its_traceback():
    out, seen = shown("torchrun_sigterm.txt")
    assert seen.signalled and seen.exit_code is None
    assert len(out) == 2 and all("torch/distributed/elastic" in line for line in out)
    assert not any("Traceback" in line or "SignalException" in line for line in out)


@pytest.mark.parametrize("code, expected", [(0, 1), (-9, 137), (3, 3)])
def test_exit_status_follows_the_failed_rank(code, expected):
    seen = TorchrunStderr()
    seen.feed(f"E1203 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: {code}) local_rank: 1 (pid: 7)")
    assert seen.failed_rank == 1
    assert exit_status(1, seen) == expected
    assert exit_status(0, seen) == 0  # torchrun's success stands


def test_a_traceback_cut_short_is_shown_at_the_end():
    seen = TorchrunStderr()
    assert seen.feed("Traceback (most recent call last):") == []
    assert seen.feed('  File "x.py", line 1') == []
    assert seen.close() == ["Traceback (most recent call last):", '  File "x.py", line 1']
