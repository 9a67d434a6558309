"""A whole local gpufair stack as child processes: etcd, S3, metrics, scheduler, cache."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from gpufair.local.procs import ChildProcess, EtcdServer, S3Server, with_parent_death

_PORT = re.compile(r"listening on port (\d+)")


def start_service(module: str, env: dict[str, str], log_path: Path, timeout: float = 60.0) -> tuple[ChildProcess, int]:
    """Run `python -m <module>` on port 0 and read the port it announces."""
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


@dataclass
class LocalStack:
    """Everything `make demo` needs; `stop()` stops it all in reverse order."""

    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gpufair-stack-")))
    cache_capacity: str = "1GiB"
    etcd: EtcdServer | None = None
    s3: S3Server | None = None
    services: dict[str, ChildProcess] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    def start(self, base_env: dict[str, str] | None = None) -> "LocalStack":
        env = dict(os.environ if base_env is None else base_env)
        self.etcd = EtcdServer(workdir=self.workdir / "etcd").start() if not env.get("GPUFAIR_ETCD") else None
        if self.etcd:
            env["GPUFAIR_ETCD"] = self.etcd.endpoint
        if not env.get("GPUFAIR_S3_ENDPOINT"):
            (self.workdir / "s3").mkdir(parents=True, exist_ok=True)
            self.s3 = S3Server(workdir=self.workdir / "s3").start()
            env.update(GPUFAIR_S3_ENDPOINT=self.s3.endpoint, GPUFAIR_S3_ACCESS_KEY=self.s3.access_key, GPUFAIR_S3_SECRET_KEY=self.s3.secret_key)
        env.update(GPUFAIR_LISTEN="127.0.0.1:0", GPUFAIR_LOG_LEVEL=env.get("GPUFAIR_LOG_LEVEL", "WARNING"), GPUFAIR_LEASE_TTL="5",
                   GPUFAIR_CACHE_DIR=str(self.workdir / "cache"), GPUFAIR_CACHE_CAPACITY=self.cache_capacity, GPUFAIR_NODE="local")
        for name, var in [("metrics", "GPUFAIR_METRICS_ADDR"), ("scheduler", "GPUFAIR_SCHEDULER_ADDR"), ("cache", "GPUFAIR_CACHE_ADDR")]:
            child, port = start_service(f"gpufair.{name}", env, self.workdir / f"{name}.log")
            self.services[name] = child
            env[var] = f"127.0.0.1:{port}"
        env.pop("GPUFAIR_LISTEN")
        self.env = env
        return self

    def stop(self) -> None:
        for child in reversed(list(self.services.values())):
            child.stop()
        for server in (self.s3, self.etcd):
            if server is not None:
                server.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{c.log_tail()}" for n, c in self.services.items())
