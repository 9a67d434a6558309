"""`python -m gpufair.local`: run a whole local stack until Ctrl-C, for trying gpufair by hand.

Starts etcd, an S3 endpoint (moto; or the one named by GPUFAIR_S3_ENDPOINT) and
the metrics, scheduler and cache services, every listener on 127.0.0.1; then
prints the `export` lines a trainer and the `gpufair` CLI need in another
terminal (the admin token too, when GPUFAIR_ADMIN_TOKEN turns authentication
on) and each service's Prometheus URL. A part that dies is restarted on its
same address, and the console says so.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
from pathlib import Path

from gpufair.local.stack import LocalStack

# What a trainer and the CLI read (gpufair.common.env), in the order they are printed.
_SHOWN = ("GPUFAIR_ETCD", "GPUFAIR_S3_ENDPOINT", "GPUFAIR_S3_ACCESS_KEY", "GPUFAIR_S3_SECRET_KEY",
          "GPUFAIR_METRICS_ADDR", "GPUFAIR_SCHEDULER_ADDR", "GPUFAIR_CACHE_ADDR",
          "GPUFAIR_ADMIN_TOKEN", "GPUFAIR_ADMIN_TOKEN_FILE", "GPUFAIR_TLS", "GPUFAIR_TLS_CA",
          "GPUFAIR_TLS_CLIENT_CERT", "GPUFAIR_TLS_CLIENT_KEY")


def exports(env: dict[str, str]) -> list[str]:
    """The `export` lines for the variables of `_SHOWN` that are set."""
    return [f"export {name}={shlex.quote(env[name])}" for name in _SHOWN if env.get(name)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpufair.local", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", default="", help="where data, caches and logs go (default: a new temp folder)")
    args = p.parse_args(argv)
    stack = LocalStack(workdir=Path(args.workdir)) if args.workdir else LocalStack()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        stack.start()
        print(f"gpufair local stack up (logs in {stack.workdir}); in another terminal:\n")
        print("\n".join(exports(stack.env)))
        print("\nPrometheus metrics:")
        for name, url in stack.metrics_urls.items():
            print(f"  {name:<10} {url}")
        stack.supervise(lambda line: print(line, flush=True))
        print("\nA part that stops is restarted on its same address. Ctrl-C stops everything.", flush=True)
        stop.wait()
        stack.stop()
        print(f"\ngpufair local stack stopped; its logs and data stay in {stack.workdir} (delete it when done)",
              flush=True)
        return 0
    except RuntimeError as exc:
        print(f"could not start the stack: {exc}", file=sys.stderr)
        return 1
    finally:
        stack.stop()


if __name__ == "__main__":
    sys.exit(main())
