"""`python -m gpufair.local`: run a whole local stack until Ctrl-C, for trying gpufair by hand.

Starts etcd, an S3 endpoint (moto; or the one named by GPUFAIR_S3_ENDPOINT) and
the metrics, scheduler and cache services on free loopback ports, then prints
the `export` lines a trainer or the `gpufair` CLI needs in another terminal.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
from pathlib import Path

from gpufair.local.stack import LocalStack

_SHOWN = ("GPUFAIR_ETCD", "GPUFAIR_S3_ENDPOINT", "GPUFAIR_S3_ACCESS_KEY", "GPUFAIR_S3_SECRET_KEY",
          "GPUFAIR_METRICS_ADDR", "GPUFAIR_SCHEDULER_ADDR", "GPUFAIR_CACHE_ADDR")


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
        for name in _SHOWN:
            if stack.env.get(name):
                print(f"export {name}={shlex.quote(stack.env[name])}")
        print("\nCtrl-C stops everything.", flush=True)
        stop.wait()
        return 0
    except RuntimeError as exc:
        print(f"could not start the stack: {exc}", file=sys.stderr)
        return 1
    finally:
        stack.stop()


if __name__ == "__main__":
    sys.exit(main())
