"""A whole local gpufair stack as child processes: etcd, S3, metrics, scheduler, cache.

Every listener binds the same host (`HOST`). Each service gets its gRPC and
Prometheus ports once, at start, and keeps them: `supervise()` restarts a
part that died (a crash, a kill -9) on the same ports, with backoff, and
reports it, so trainers and the CLI keep the addresses they were given.
"""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpufair.local.procs import ChildProcess, EtcdServer, S3Server, free_port, with_parent_death

_PORT = re.compile(r"listening on port (\d+)")
HOST = "127.0.0.1"
SERVICES = (("metrics", "GPUFAIR_METRICS_ADDR"), ("scheduler", "GPUFAIR_SCHEDULER_ADDR"), ("cache", "GPUFAIR_CACHE_ADDR"))


def start_service(module: str, env: dict[str, str], log_path: Path, timeout: float = 60.0) -> tuple[ChildProcess, int]:
    """Run `python -m <module>` (GPUFAIR_LISTEN from `env`, port 0 allowed) and read the port it announces."""
    log = open(log_path, "ab")
    proc = subprocess.Popen(with_parent_death([sys.executable, "-m", module]), stdout=subprocess.PIPE, stderr=log, env=env,
                            start_new_session=True)
    log.close()
    child = ChildProcess(proc, log_path)
    assert proc.stdout is not None
    # Wait for the announcement with a deadline: a service stuck before it must not hang us.
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline().decode(errors="replace") if ready else ""
    m = _PORT.search(line)
    if not m:
        child.stop()
        raise RuntimeError(f"{module} did not start within {timeout:.0f}s:\n{line}{child.log_tail()}")
    return child, int(m.group(1))


def _exit_text(code: int | None) -> str:
    return f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"


@dataclass
class _Part:
    """One supervised child: how to start it again, and its restart state."""

    name: str
    restart: Callable[[], None]
    alive: Callable[[], bool]
    returncode: Callable[[], int | None]
    address: str
    failures: int = 0
    up_since: float = field(default_factory=time.monotonic)


@dataclass
class LocalStack:
    """Everything `make demo` and `python -m gpufair.local` need; `stop()` stops it all in reverse order."""

    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gpufair-stack-")))
    cache_capacity: str = "1GiB"
    etcd: EtcdServer | None = None
    s3: S3Server | None = None
    services: dict[str, ChildProcess] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    metrics_urls: dict[str, str] = field(default_factory=dict)  # service -> its Prometheus scrape URL
    _service_env: dict[str, dict[str, str]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _supervisor: threading.Thread | None = None

    def start(self, base_env: dict[str, str] | None = None) -> "LocalStack":
        env = dict(os.environ if base_env is None else base_env)
        self.etcd = EtcdServer(workdir=self.workdir / "etcd").start() if not env.get("GPUFAIR_ETCD") else None
        if self.etcd:
            env["GPUFAIR_ETCD"] = self.etcd.endpoint
        if not env.get("GPUFAIR_S3_ENDPOINT"):
            (self.workdir / "s3").mkdir(parents=True, exist_ok=True)
            self.s3 = S3Server(workdir=self.workdir / "s3").start()
            env.update(GPUFAIR_S3_ENDPOINT=self.s3.endpoint, GPUFAIR_S3_ACCESS_KEY=self.s3.access_key, GPUFAIR_S3_SECRET_KEY=self.s3.secret_key)
        env.update(GPUFAIR_LOG_LEVEL=env.get("GPUFAIR_LOG_LEVEL", "WARNING"), GPUFAIR_LEASE_TTL="5",
                   GPUFAIR_CACHE_DIR=str(self.workdir / "cache"), GPUFAIR_CACHE_CAPACITY=self.cache_capacity, GPUFAIR_NODE="local")
        for name, var in SERVICES:
            # Ports chosen once: a restarted service comes back where its clients look for it.
            port, prom = free_port(HOST), free_port(HOST)
            self._service_env[name] = dict(env, GPUFAIR_LISTEN=f"{HOST}:{port}", GPUFAIR_PROMETHEUS_PORT=str(prom))
            self.services[name], _ = start_service(f"gpufair.{name}", self._service_env[name], self.workdir / f"{name}.log")
            env[var] = f"{HOST}:{port}"
            self.metrics_urls[name] = f"http://{HOST}:{prom}/metrics"
        env.pop("GPUFAIR_LISTEN", None)
        env.pop("GPUFAIR_PROMETHEUS_PORT", None)
        self.env = env
        return self

    def _parts(self) -> list[_Part]:
        parts = []
        if self.etcd is not None:
            etcd = self.etcd
            parts.append(_Part("etcd", lambda: etcd.start(), lambda: bool(etcd.child and etcd.child.alive()),
                               lambda: etcd.child.proc.poll() if etcd.child else None, etcd.endpoint))
        if self.s3 is not None:
            s3 = self.s3
            parts.append(_Part("s3", lambda: s3.start(), lambda: bool(s3.child and s3.child.alive()),
                               lambda: s3.child.proc.poll() if s3.child else None, s3.endpoint))
        for name, var in SERVICES:
            parts.append(_Part(name, lambda n=name: self._restart_service(n), lambda n=name: self.services[n].alive(),
                               lambda n=name: self.services[n].proc.poll(), self.env.get(var, "")))
        return parts

    def _restart_service(self, name: str) -> None:
        self.services[name], _ = start_service(f"gpufair.{name}", self._service_env[name], self.workdir / f"{name}.log")

    def supervise(self, report: Callable[[str], None] = print, *, check_s: float = 0.5, first_backoff_s: float = 1.0,
                  max_backoff_s: float = 30.0) -> None:
        """Watch every part from a background thread; restart one that died on its same
        address, waiting 1, 2, 4 ... 30 s between failed tries (reset after a minute up)."""
        parts = self._parts()

        def run() -> None:
            while not self._stop.wait(check_s):
                for part in parts:
                    if part.alive():
                        if time.monotonic() - part.up_since > 60:
                            part.failures = 0
                        continue
                    self._revive(part, report, first_backoff_s, max_backoff_s)

        self._supervisor = threading.Thread(target=run, name="gpufair-local-supervisor", daemon=True)
        self._supervisor.start()

    def _revive(self, part: _Part, report: Callable[[str], None], first_s: float, max_s: float) -> None:
        delay = min(first_s * 2 ** part.failures, max_s)
        report(f"gpufair local: {part.name} stopped ({_exit_text(part.returncode())}); restarting it on {part.address} in {delay:g}s")
        if self._stop.wait(delay):
            return
        try:
            part.restart()
        except (RuntimeError, OSError) as exc:
            part.failures += 1
            report(f"gpufair local: {part.name} did not restart: {str(exc).splitlines()[0] if str(exc) else exc}")
            return
        part.failures += 1
        part.up_since = time.monotonic()
        report(f"gpufair local: {part.name} is back on {part.address}")

    def stop(self) -> None:
        self._stop.set()
        if self._supervisor is not None:
            self._supervisor.join(5)
        for child in reversed(list(self.services.values())):
            child.stop()
        for server in (self.s3, self.etcd):
            if server is not None:
                server.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{c.log_tail()}" for n, c in self.services.items())
