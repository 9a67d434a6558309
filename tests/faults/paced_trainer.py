"""Runs examples/train_ddp.py unchanged, with a fixed extra cost per step and a log of received split commands.

Fault tests need a job that lasts long enough to kill services under it, and
evidence of what each rank was told. FAULT_STEP_S adds that much to every
step's compute; FAULT_COMMANDS_LOG=<prefix> appends one JSON line per command
this rank received to `<prefix>.rank<RANK>`.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from gpufair.client import commands, session

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_ddp.py"


def _pace(step_s: float) -> None:
    original = session.Session.compute

    @contextlib.contextmanager
    def compute(self: session.Session) -> Iterator[None]:
        with original(self):
            time.sleep(step_s)
            yield

    session.Session.compute = compute  # type: ignore[method-assign]


def _record_commands(prefix: str) -> None:
    original = commands.GrpcCommandSource.__init__
    path = f"{prefix}.rank{os.environ.get('RANK', '0')}"

    def init(self: commands.GrpcCommandSource, *args, on_command=None, **kwargs) -> None:  # type: ignore[no-untyped-def]
        def record(cmd, received: float) -> None:  # type: ignore[no-untyped-def]
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"version": cmd.version, "apply_step": cmd.apply_step, "sizes": list(cmd.split),
                                     "received_unix_s": received}) + "\n")
            if on_command:
                on_command(cmd, received)

        original(self, *args, on_command=record, **kwargs)

    commands.GrpcCommandSource.__init__ = init  # type: ignore[method-assign]


if __name__ == "__main__":
    _pace(float(os.environ.get("FAULT_STEP_S", "0")))
    if os.environ.get("FAULT_COMMANDS_LOG"):
        _record_commands(os.environ["FAULT_COMMANDS_LOG"])
    sys.argv = [str(EXAMPLE), *sys.argv[1:]]
    runpy.run_path(str(EXAMPLE), run_name="__main__")
