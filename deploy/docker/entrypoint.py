"""Container entrypoint: the first argument selects what the image runs.

    metrics | scheduler | cache   run that gpufair service (`python -m gpufair.<name>`)
    health [ARGS]                 gRPC health check (health_probe.py), for probes
    help                          this text
    anything else                 executed as given (torchrun, gpufair, a shell, ...)

The chosen program replaces this process (exec), so it is PID 1 and receives
SIGTERM directly for a graceful drain.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Service name -> module run with `python -m`. tests/deploy checks each exists.
SERVICES: dict[str, str] = {
    "metrics": "gpufair.metrics",
    "scheduler": "gpufair.scheduler",
    "cache": "gpufair.cache",
}
HEALTH_SCRIPT = Path(__file__).with_name("health_probe.py")


def command_for(argv: list[str]) -> list[str] | None:
    """The command line to exec for the container's arguments, or None for help."""
    if not argv or argv[0] in {"help", "-h", "--help"}:
        return None
    name, rest = argv[0], argv[1:]
    if name in SERVICES:
        return [sys.executable, "-m", SERVICES[name], *rest]
    if name == "health":
        return [sys.executable, str(HEALTH_SCRIPT), *rest]
    return argv


def main(argv: list[str]) -> int:
    command = command_for(argv)
    if command is None:
        print(__doc__)
        return 0
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"gpufair-entrypoint: cannot run {command[0]!r}: {exc}", file=sys.stderr)
        return 127
    return 0  # not reached: exec replaced the process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
