"""Child-process handles for etcd and a local S3 endpoint (moto's server mode)."""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel just handed out for port 0 (for servers that cannot bind 0 themselves)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


@dataclass
class ChildProcess:
    """A started child process with its log; `stop()` is idempotent."""

    proc: subprocess.Popen[bytes]
    log_path: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, for fault-injection tests."""
        if self.alive():
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 10.0) -> None:
        if not self.alive():
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=timeout)

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""


def with_parent_death(argv: list[str]) -> list[str]:
    """`argv`, made to receive SIGTERM when the process that starts it dies (Linux).

    A test run or demo killed with -9 then leaves no servers behind. util-linux's
    setpriv sets the signal and execs: no Python runs between fork and exec (a
    preexec_fn can deadlock in a process with threads, such as gRPC's).
    """
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--", *argv] if setpriv else list(argv)


def _spawn(argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> ChildProcess:
    log = open(log_path, "ab")
    try:
        # A new session, so Ctrl-C in a terminal reaches the parent first and
        # the parent stops children in order.
        proc = subprocess.Popen(with_parent_death(argv), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    finally:
        log.close()
    return ChildProcess(proc, log_path)


def _wait_until(check, child: ChildProcess, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if not child.alive():
            raise RuntimeError(f"{what} exited during start-up:\n{child.log_tail()}")
        time.sleep(0.05)
    child.stop()
    raise RuntimeError(f"{what} did not become ready in {timeout:.0f}s:\n{child.log_tail()}")


def etcd_binary() -> str:
    found = shutil.which("etcd") or ("/usr/bin/etcd" if Path("/usr/bin/etcd").exists() else None)
    if not found:
        raise RuntimeError("etcd is not installed: run `make setup` (installs Debian's etcd-server)")
    return found


@dataclass
class EtcdServer:
    """A real single-member etcd on loopback with its own data dir.

    The data dir survives `stop()`/`start()` so restart tests see the same
    state; `close()` removes it.
    """

    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gpufair-etcd-")))
    client_port: int = 0
    child: ChildProcess | None = None
    extra_args: list[str] = field(default_factory=list)  # e.g. ["--auth-token-ttl", "1"] in tests

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def start(self, timeout: float = 30.0) -> "EtcdServer":
        self.workdir.mkdir(parents=True, exist_ok=True)
        for attempt in range(5):
            # Keep the client port across restarts so clients reconnect.
            if self.client_port == 0 or attempt > 0:
                self.client_port = free_port()
            peer = free_port()
            argv = [
                etcd_binary(),
                "--name", "gpufair-test",
                "--data-dir", str(self.workdir / "data"),
                "--listen-client-urls", f"http://127.0.0.1:{self.client_port}",
                "--advertise-client-urls", f"http://127.0.0.1:{self.client_port}",
                "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", f"gpufair-test=http://127.0.0.1:{peer}",
                "--log-level", "warn",
                *self.extra_args,
            ]
            env = dict(os.environ, ETCD_UNSUPPORTED_ARCH=os.environ.get("ETCD_UNSUPPORTED_ARCH", ""))
            self.child = _spawn(argv, self.workdir / "etcd.log", env)
            try:
                _wait_until(lambda: _port_open("127.0.0.1", self.client_port), self.child, timeout, "etcd")
                return self
            except RuntimeError as exc:
                # A port raced with another process: pick new ones and retry.
                if "address already in use" not in str(exc) or attempt == 4:
                    raise
        return self

    def stop(self) -> None:
        if self.child:
            self.child.stop()

    def kill(self) -> None:
        if self.child:
            self.child.kill()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


_RUNNING_ON = re.compile(rb"Running on http://127\.0\.0\.1:(\d+)")


@dataclass
class S3Server:
    """A local S3-compatible endpoint (moto's server mode) for the `minio` SDK."""

    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gpufair-s3-")))
    port: int = 0
    child: ChildProcess | None = None
    access_key: str = "gpufair-test"
    secret_key: str = "gpufair-test-secret"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> "S3Server":
        self.workdir.mkdir(parents=True, exist_ok=True)
        moto = Path(sys.executable).with_name("moto_server")
        argv = [str(moto) if moto.exists() else "moto_server", "-H", "127.0.0.1", "-p", str(self.port)]
        log_path = self.workdir / "s3.log"
        log_path.write_bytes(b"")
        # The work dir in the environment tags the process as ours (cleanup checks find it).
        self.child = _spawn(argv, log_path, dict(os.environ, GPUFAIR_LOCAL_WORKDIR=str(self.workdir)))

        def ready() -> bool:
            if self.port == 0:
                m = _RUNNING_ON.search(log_path.read_bytes())
                if not m:
                    return False
                self.port = int(m.group(1))
            return _port_open("127.0.0.1", self.port)

        _wait_until(ready, self.child, timeout, "S3 endpoint (moto_server)")
        return self

    def stop(self) -> None:
        if self.child:
            self.child.stop()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def stop_all(handles: list, timeout: float = 10.0) -> None:
    """Stop handles in reverse start order, never raising (for finally blocks)."""
    for h in reversed(handles):
        try:
            h.stop()
        except Exception:  # noqa: BLE001 - best effort during shutdown
            logger.exception("stopping %r failed", h)


