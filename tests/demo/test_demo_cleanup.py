"""`make demo` stops everything it started, also when interrupted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (proc / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if text in cmdline or text in environ:  # services and the S3 endpoint carry it in their environment
            found.append(f"{proc.name}: {cmdline[:150]}")
    return found


@pytest.mark.parametrize(("phase", "running"), [
    ("layout", "layout phase: measuring each job's exclusive speed"),
    ("arrivals", "run 1/2: preset k8s"),  # `gpufair submit` processes and their torchruns
])
def test_ctrl_c_during_the_demo_stops_every_process_it_started(tmp_path: Path, phase: str, running: str) -> None:
    out = tmp_path / "demo-out"
    proc = subprocess.Popen([sys.executable, "-m", "gpufair.demo", "--out", str(out), "--phase", phase],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # wait until trainers run: the stack and jobs are all up
            lines.append(line)
            if line.startswith(running):
                break
        else:
            pytest.fail("demo ended before starting its jobs:\n" + "".join(lines))
        deadline = time.monotonic() + 30
        while not list((out / "logs").glob("*.log")) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _processes_mentioning(str(out)), "no demo child processes found while it runs"
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=60)[0]
        assert proc.returncode == 130, "".join(lines) + rest
        deadline = time.monotonic() + 15
        while _processes_mentioning(str(out)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _processes_mentioning(str(out)) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_demo_refuses_an_output_folder_an_old_run_left_and_touches_nothing(tmp_path: Path) -> None:
    """An old run's etcd, emulated-GPU counters and timings would mix into a new one
    (utilisation above 100 %, finished jobs listed as running): a clear error instead."""
    out = tmp_path / "old-run"
    (out / "stack").mkdir(parents=True)
    (out / "results.json").write_text("{}")
    done = subprocess.run([sys.executable, "-m", "gpufair.demo", "--out", str(out)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "not an empty folder" in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["results.json", "stack"]
    assert (out / "results.json").read_text() == "{}"
