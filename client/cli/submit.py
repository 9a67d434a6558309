"""`gpufair submit --gpus N [...] -- CMD ...` and `gpufair queue`.

`submit` asks the scheduler for N of this node's GPUs (the emulated ones of
GPUFAIR_EMU_GPUS where it is set, else real ones where NVML shows them), waits in the queue
with a live progress line, then starts CMD under torchrun on the GPUs it
got (CUDA_VISIBLE_DEVICES, or GPUFAIR_EMU_DEVICES by local rank) as job
GPUFAIR_JOB, and exits with the job's exit code (the first failed rank's;
torchrun's own report of it is left out, `launchlog.py`). Ctrl-C (or SIGTERM)
withdraws the job and stops what it started; CMD may be a script, an
executable, or `-m module`.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.client.cli.common import (EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, add_json_flag, call,
                                       call_and_render, fail, in_range, table, to_dict)
from gpufair.client.cli.launchlog import TorchrunStderr, exit_status
from gpufair.client.config import ClientConfig
from gpufair.common import env
from gpufair.local.procs import with_parent_death

_POLL_S = 0.5  # while queued
_FIRST_POLL_S = 0.02  # a submission wakes the scheduler: most are placed within tens of ms


def poll_delays() -> Iterator[float]:
    """Seconds between placement polls: doubling from `_FIRST_POLL_S` to `_POLL_S`,
    so a job placed at once starts at once and a queued one costs 2 calls a second."""
    delay = _FIRST_POLL_S
    while True:
        yield delay
        delay = min(2 * delay, _POLL_S)


def register(sub: argparse._SubParsersAction) -> None:
    """Add `submit` and `queue`."""
    p = sub.add_parser("submit", help="run a training command on GPUs the scheduler assigns",
                       description=__doc__.split("\n\n")[1])
    p.add_argument("--gpus", type=in_range(int, 1, 4096, "a GPU count"), required=True, help="GPUs (ranks) to ask for")
    p.add_argument("--job", default="", help="job id (default: generated)")
    p.add_argument("--dataset", default="", help="dataset URI: a node whose cache holds it is preferred")
    p.add_argument("--model", default="", help="model name, for its stored profile")
    p.add_argument("--global-batch", type=in_range(int, 1, 1 << 30, "a batch size"), default=0,
                   help="the job's global batch (default: one per GPU)")
    p.add_argument("--samples", type=in_range(int, 0, 1 << 62, "a sample count"), default=0,
                   help="the job's total work in samples, if known")
    p.add_argument("--rate", type=in_range(float, 0, 1e12, "samples/s"), default=0.0,
                   help="its speed alone on its GPUs in samples/s, if known (else a profile, else an hour)")
    p.add_argument("--torchrun", default="", help="launcher (default: this Python's torch.distributed.run)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the training command")
    p.set_defaults(func=submit)
    q = sub.add_parser("queue", help="the jobs waiting for GPU time, in order")
    add_json_flag(q)
    q.set_defaults(func=queue)


def _local_devices(config: ClientConfig) -> tuple[list[str], str, dict[str, str]]:
    """(device ids, device type, id -> what CMD's ranks use to find it) on this node:
    the emulated GPUs if GPUFAIR_EMU_GPUS is set, else NVML's, else one emulated GPU."""
    from gpufair.client.nvml import NvmlReader

    gpus = [] if os.environ.get(env.EMU_GPUS.name) else NvmlReader().read()
    if gpus:
        return [g.uuid for g in gpus], gpus[0].name.lower().replace(" ", "-"), {g.uuid: str(g.index) for g in gpus}
    from gpufair.client.workloads.emulated import EmuConfig

    emu = EmuConfig.from_env()
    ids = [emu.device_id(i) for i in range(len(emu.speeds))]
    return ids, "emulated", {d: str(i) for i, d in enumerate(ids)}


def _progress(entry: pb.QueueEntry, waited: float) -> str:
    start = f"~{entry.predicted_start_s:.0f}s" if entry.predicted_start_s >= 0 else "unknown"
    return f"queued: position {entry.position}, predicted start {start}, waited {waited:.0f}s ({entry.reason})"


def _wait_for_placement(job: str, tty: bool) -> tuple[pb.Submission | None, int]:
    """Poll until placed: (submission, EXIT_OK), or (None, exit code)."""
    started, last, delays = time.monotonic(), "", poll_delays()
    while True:
        res, code = call(f"submit {job}", "scheduler", "GetSubmission", pb.GetSubmissionRequest(job_id=job))
        if code:
            return None, code
        if res.submission.placed_devices:
            if tty and last:
                sys.stderr.write("\n")
            return res.submission, EXIT_OK
        line = _progress(res.queue, time.monotonic() - started) if res.HasField("queue") \
            else f"submitted; waiting for the next decision round ({time.monotonic() - started:.0f}s)"
        if tty:
            sys.stderr.write("\r" + line[:150].ljust(150))
            sys.stderr.flush()
        elif line.split(",")[0] != last.split(",")[0]:
            print(line, file=sys.stderr, flush=True)
        last = line
        time.sleep(next(delays))


def _launch(args: argparse.Namespace, job: str, placed: list[str], local: dict[str, str], emulated: bool
            ) -> subprocess.Popen[str]:
    cmd = list(args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd)
    launcher = args.torchrun.split() if args.torchrun else [sys.executable, "-m", "torch.distributed.run"]
    run = [*launcher, "--nproc-per-node", str(len(placed)), "--master-port", str(_free_port())]
    if cmd[0] != "-m" and not cmd[0].endswith(".py"):
        run.append("--no-python")  # an executable; a script or `-m module` runs under Python
    child_env = dict(os.environ, GPUFAIR_JOB=job)
    indices = ",".join(local[d] for d in placed)
    if emulated:
        child_env["GPUFAIR_EMU_DEVICES"] = indices
    else:
        child_env["CUDA_VISIBLE_DEVICES"] = indices
    # Its own session (Ctrl-C reaches this process, which stops it in order); and
    # SIGTERM to it if this process dies, so a killed submit leaves no trainers.
    # Its stderr (the trainers' too) goes through `TorchrunStderr`.
    return subprocess.Popen(with_parent_death([*run, *cmd]), env=child_env, start_new_session=True,
                            stderr=subprocess.PIPE, text=True, errors="replace", bufsize=1)


def _relay(proc: subprocess.Popen[str], seen: TorchrunStderr) -> threading.Thread:
    """Copy torchrun's stderr to ours through `seen` (on a thread)."""
    def run() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            for out in seen.feed(line.rstrip("\n")):
                print(out, file=sys.stderr, flush=True)
        for out in seen.close():
            print(out, file=sys.stderr, flush=True)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen[str] | None, job: str, placed: bool) -> None:
    """Withdraw the job and stop what was started (Ctrl-C)."""
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    call(f"withdraw {job}", "scheduler", "WithdrawSubmission", pb.WithdrawSubmissionRequest(job_id=job))
    if placed:
        call(f"remove {job}", "scheduler", "RemoveJob", pb.RemoveJobRequest(job_id=job))


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def submit(args: argparse.Namespace) -> int:
    """Entry point: the job's exit code; 1 the scheduler failed; 2 bad input; 130 interrupted."""
    cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    if not cmd:
        return fail("submit: give the training command after --, e.g. gpufair submit --gpus 2 -- "
                    "examples/train_ddp.py --epochs 1", EXIT_USAGE)
    signal.signal(signal.SIGTERM, _interrupt)  # a scheduler or shell stopping submit: as Ctrl-C
    config = ClientConfig.from_env()
    devices, device_type, local = _local_devices(config)
    if args.gpus > len(devices):
        hint = f" ({env.EMU_GPUS.name} sets how many are emulated)" if device_type == "emulated" else ""
        return fail(f"submit: --gpus {args.gpus}, but this node offers {len(devices)} {device_type} GPU"
                    f"{'s' if len(devices) != 1 else ''}{hint}", EXIT_USAGE)
    job = args.job or f"job-{uuid.uuid4().hex[:8]}"
    sub = pb.Submission(job_id=job, num_gpus=args.gpus, node=config.node, devices=devices, device_type=device_type,
                        model=args.model, global_batch=args.global_batch or args.gpus, total_samples=args.samples,
                        exclusive_samples_per_s=args.rate, dataset=args.dataset)
    res, code = call(f"submit {job}", "scheduler", "SubmitJob", pb.SubmitJobRequest(submission=sub))
    if code:
        return code
    print(f"submitted {job}: {args.gpus} of {len(devices)} {device_type} GPUs on {config.node}", file=sys.stderr)
    proc, placed = None, False
    try:
        got, code = _wait_for_placement(job, sys.stderr.isatty())
        if got is None:
            return code
        placed, devices_got = True, list(got.placed_devices)
        waited = time.time() - got.submitted_unix_s
        sd = f"predicted SD {got.predicted_sd:.2f}" if got.predicted_sd > 0 else "starts held"
        print(f"placed {job} on {', '.join(devices_got)} after {waited:.0f}s: {got.placed_why or 'placed'}; {sd}",
              file=sys.stderr, flush=True)
        unknown = [d for d in devices_got if d not in local]
        if unknown:  # a scheduler that placed it beyond what this node offered
            _stop(None, job, placed)
            return fail(f"submit {job}: placed on {', '.join(unknown)}, which this node did not offer "
                        f"({', '.join(devices) or 'none'}); withdrawn", EXIT_FAIL)
        proc = _launch(args, job, devices_got, local, device_type == "emulated")
        seen = TorchrunStderr()
        relay = _relay(proc, seen)
        code = proc.wait()
        relay.join(timeout=5)
        # The submission has served; one whose command failed before its trainers
        # registered would otherwise keep its GPUs until the scheduler's TTL.
        call(f"withdraw {job}", "scheduler", "WithdrawSubmission", pb.WithdrawSubmissionRequest(job_id=job))
        status = exit_status(code, seen)
        if status:
            rank = f" on local rank {seen.failed_rank}" if seen.failed_rank is not None else ""
            print(f"gpufair: {' '.join(cmd)[:200]} failed{rank} with exit code {status}", file=sys.stderr)
        return status
    except KeyboardInterrupt:
        print(f"\ninterrupted: withdrawing {job} and stopping what it started", file=sys.stderr)
        _stop(proc, job, placed)
        return EXIT_INTERRUPTED
    except OSError as exc:
        _stop(proc, job, placed)
        return fail(f"submit {job}: cannot start {cmd[0]}: {exc.strerror}", EXIT_FAIL)


def queue(args: argparse.Namespace) -> int:
    """`gpufair queue [--json]`."""
    def render(res: pb.ListQueueResponse) -> None:
        if not res.entries:
            print("no job waits for GPU time" + ("" if res.decided_unix_s else " (no decision round yet)"))
            return
        rows = [[e.position, e.job_id, "submitted" if e.submitted else "held on its GPUs",
                 f"{e.predicted_start_s:.0f}s" if e.predicted_start_s >= 0 else "-", f"{e.waited_s:.0f}s", e.reason]
                for e in res.entries]
        print(table(["#", "job", "waiting", "start in", "waited", "why"], rows))

    return call_and_render(args, "queue", "scheduler", "ListQueue", pb.ListQueueRequest(), render, as_json=to_dict)
