"""`python -m gpufair.local` brings a whole stack up, prints how to reach it (the admin
token too, with auth on, and every Prometheus URL), binds every listener to 127.0.0.1,
restarts a part killed with -9 on its same address and says so, and takes it all down."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
TOKEN = "local-admin-token"


def _lines(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    out: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return out


def _wait_line(lines: queue.Queue[str], pattern: str, timeout: float, seen: list[str]) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Empty:
            break
        seen.append(line)
        if m := re.search(pattern, line):
            return m
    raise AssertionError(f"no line matching {pattern!r} within {timeout:.0f}s:\n{''.join(seen[-30:])}")


def _listen_hosts(port: int) -> set[str]:
    """The local addresses of the listening TCP sockets on `port` (from /proc/net/tcp and tcp6)."""
    hosts = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            local, state = row.split()[1], row.split()[3]
            addr, hexport = local.split(":")
            if state == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                hosts.add("127.0.0.1" if addr in ("0100007F", "0000000000000000FFFF00000100007F") else addr)
    return hosts


def _pid_of(module: str, workdir: Path) -> int:
    """The process running `python -m <module>` for the stack in `workdir`."""
    for entry in Path("/proc").iterdir():
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if module.encode() in cmd and f"GPUFAIR_CACHE_DIR={workdir / 'cache'}".encode() in environ:
            return int(entry.name)
    raise AssertionError(f"no {module} process of {workdir}")


def _serving(addr: str, timeout: float = 60) -> bool:
    with grpc.insecure_channel(addr) as ch:
        watch = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest(), wait_for_ready=True, timeout=timeout)
        ok = any(r.status == health_pb2.HealthCheckResponse.SERVING for r in watch)
        watch.cancel()
        return ok


def test_local_stack_exports_supervises_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    env = dict(os.environ, GPUFAIR_S3_ENDPOINT="", GPUFAIR_ADMIN_TOKEN=TOKEN)
    proc = subprocess.Popen([sys.executable, "-m", "gpufair.local", "--workdir", str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    lines, seen = _lines(proc), []
    try:
        _wait_line(lines, "Ctrl-C", 90, seen)
        exports = dict(re.findall(r"^export (GPUFAIR_\w+)=(\S+)$", "".join(seen), re.MULTILINE))
        urls = dict(re.findall(r"^  (\w+) +(http://\S+)$", "".join(seen), re.MULTILINE))
        assert exports["GPUFAIR_ADMIN_TOKEN"] == TOKEN  # with auth on, the CLI and trainers need it
        assert set(urls) == {"metrics", "scheduler", "cache"}
        ports = [int(exports[v].rsplit(":", 1)[1]) for v in ("GPUFAIR_METRICS_ADDR", "GPUFAIR_SCHEDULER_ADDR", "GPUFAIR_CACHE_ADDR",
                                                             "GPUFAIR_ETCD", "GPUFAIR_S3_ENDPOINT")]
        ports += [int(u.rsplit(":", 1)[1].split("/")[0]) for u in urls.values()]
        for name in ("GPUFAIR_METRICS_ADDR", "GPUFAIR_SCHEDULER_ADDR", "GPUFAIR_CACHE_ADDR"):
            assert _serving(exports[name]), name
        for url in urls.values():
            with urllib.request.urlopen(url, timeout=10) as res:
                assert res.status == 200
        for port in ports:
            assert _listen_hosts(port) == {"127.0.0.1"}, (port, _listen_hosts(port))

        cli_env = dict(os.environ, **exports)
        cli_env.pop("GPUFAIR_JOB_TOKEN", None)
        policy = subprocess.run([sys.executable, "-m", "gpufair.client.cli", "policy", "set", "balance"], env=cli_env,
                                capture_output=True, text=True, timeout=60)
        assert policy.returncode == 0, policy.stderr  # an admin RPC works with the printed exports alone

        os.kill(_pid_of("gpufair.scheduler", tmp_path), signal.SIGKILL)
        _wait_line(lines, r"scheduler stopped \(killed by signal 9\); restarting it on " + re.escape(exports["GPUFAIR_SCHEDULER_ADDR"]),
                   30, seen)
        _wait_line(lines, r"scheduler is back on " + re.escape(exports["GPUFAIR_SCHEDULER_ADDR"]), 60, seen)
        assert _serving(exports["GPUFAIR_SCHEDULER_ADDR"])  # the same address: clients need no new exports
        listed = subprocess.run([sys.executable, "-m", "gpufair.client.cli", "policy", "get"], env=cli_env,
                                capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0 and "policy balance" in listed.stdout, listed.stderr  # state kept in etcd

        proc.send_signal(signal.SIGINT)
        _wait_line(lines, r"gpufair local stack stopped; its logs and data stay in ", 60, seen)  # where to look, what to delete
        assert proc.wait(timeout=60) == 0
        for name in ("GPUFAIR_METRICS_ADDR", "GPUFAIR_SCHEDULER_ADDR"):
            with grpc.insecure_channel(exports[name]) as ch, pytest.raises(grpc.RpcError):
                health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=2)
    finally:
        if proc.poll() is None:
            proc.kill()
