"""Split command latency: from the scheduler writing a split to the trainer applying it, at a fixed step time.

A real etcd, metrics service and scheduler run as child processes; a 2-rank
gloo job (latency_trainer.py) is paced at `--step-s` per step. The driver pins
`--splits` new splits with PinSplit at random 1.2-1.8 s intervals (so they do
not phase-lock with the agreement steps). For each split it reports

* delivery: PinSplit's `issued_unix_s` -> the rank's command thread received it
  (etcd write, the scheduler's watch, the command stream);
* applied: `issued_unix_s` -> the first step whose batch used the new split
  (delivery + waiting for the next agreement step + the step it is launched in).

Runs once per `--agree` mode, each with its own job, in the same run: K
agrees every K steps (`sync_every=K`, no time target), Xs about every X
seconds at most 10 steps apart (`sync_every_s=X`, the default 0.1 s).

    .venv/bin/python bench/client/command_latency.py [--splits 30] [--step-s 0.05] [--agree 10 0.1s 1]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from controlplane import control_plane  # noqa: E402

from gpufair.api.metrics.v1 import metrics_service_pb2 as mpb  # noqa: E402
from gpufair.api.metrics.v1 import metrics_service_pb2_grpc as mpb_grpc  # noqa: E402
from gpufair.api.scheduler.v1 import scheduler_service_pb2 as spb  # noqa: E402
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as spb_grpc  # noqa: E402
from gpufair.local.launch import launch  # noqa: E402

TRAINER = Path(__file__).resolve().parent / "latency_trainer.py"
SPLITS = [(48, 16), (16, 48), (40, 24), (24, 40), (32, 32), (56, 8), (8, 56)]


def wait_for_steps(stub: mpb_grpc.MetricsServiceStub, job_id: str, steps: int, job, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not job.alive():
            raise RuntimeError(f"trainer exited early:\n{job.logs()}")
        try:
            if stub.GetJobStats(mpb.GetJobStatsRequest(job_id=job_id), timeout=2).stats.steps_done >= steps:
                return
        except grpc.RpcError:
            pass  # no telemetry yet
        time.sleep(0.1)
    raise RuntimeError(f"job {job_id} did not reach step {steps}:\n{job.logs()}")


def agreement_args(mode: str) -> list[str]:
    """The trainer's flags for an `--agree` mode: K (every K steps) or Xs (about every X s)."""
    if mode.endswith("s"):
        return ["--sync-every", "10", "--sync-every-s", str(float(mode[:-1]))]
    return ["--sync-every", str(int(mode))]


def agree_mode(text: str) -> str:
    """argparse type for `--agree`: K >= 1 or X s with X > 0."""
    try:
        ok = float(text[:-1]) > 0 if text.endswith("s") else int(text) >= 1
    except ValueError:
        ok = False
    if not ok:
        raise argparse.ArgumentTypeError(f"{text!r}: give K (every K steps, K >= 1) or Xs (about every X seconds)")
    return text


def run_job(env: dict[str, str], workdir: Path, mode: str, n_splits: int, step_s: float, rng: random.Random) -> dict:
    """Pin `n_splits` splits into one running job; returns issued times and each rank's observations."""
    job_id = f"latency-{mode.replace('.', '_')}"
    steps = 30 + math.ceil(n_splits * 1.8 / step_s) + 40
    out = workdir / job_id
    job = launch(job_id, [str(TRAINER), "--job", job_id, "--steps", str(steps), "--step-s", str(step_s), *agreement_args(mode),
                          "--out", str(out)], 2, workdir, dict(os.environ, **env))
    issued: dict[int, float] = {}
    try:
        with grpc.insecure_channel(env["GPUFAIR_METRICS_ADDR"]) as mch, grpc.insecure_channel(env["GPUFAIR_SCHEDULER_ADDR"]) as sch:
            wait_for_steps(mpb_grpc.MetricsServiceStub(mch), job_id, 20, job)
            sched = spb_grpc.SchedulerServiceStub(sch)
            previous: tuple[int, int] | None = None
            for _ in range(n_splits):
                sizes = rng.choice([s for s in SPLITS if s != previous])
                split = sched.PinSplit(spb.PinSplitRequest(job_id=job_id, batch_sizes=sizes), timeout=10).split
                issued[split.version] = split.issued_unix_s
                previous = sizes
                time.sleep(rng.uniform(1.2, 1.8))
        codes = job.wait(timeout=steps * step_s * 3 + 60)
        if codes != [0, 0]:
            raise RuntimeError(f"trainer failed {codes}:\n{job.logs()}")
    finally:
        job.kill()
    ranks = [json.loads(Path(f"{out}.rank{r}.json").read_text()) for r in range(2)]
    return {"issued": issued, "ranks": ranks}


def summarise(result: dict) -> dict[str, np.ndarray | int]:
    issued, ranks = result["issued"], result["ranks"]
    delivery, applied, lead, mismatched, superseded = [], [], [], 0, 0
    for version, t_issued in issued.items():
        got = [r["received"].get(str(version)) for r in ranks]
        used = [r["applied"].get(str(version)) for r in ranks]
        delivery += [g[0] - t_issued for g in got if g]
        if not all(used):
            superseded += 1  # a newer pin arrived before this one's agreement step
            continue
        if len({u[1] for u in used}) != 1:
            mismatched += 1
        applied += [u[0] - t_issued for u in used]
        lead += [u[1] - g[1] for u, g in zip(used, got) if g and g[1] >= 0]
    return {"delivery": np.array(delivery), "applied": np.array(applied), "steps_after_receipt": np.array(lead),
            "superseded": superseded, "mismatched": mismatched, "splits": len(issued)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=30)
    parser.add_argument("--step-s", type=float, default=0.05, help="paced step time (0.05 = 20 steps/s)")
    parser.add_argument("--agree", nargs="+", type=agree_mode, default=["10", "0.1s", "1"],
                        help="agreement modes to compare: K (every K steps) or Xs (about every X seconds)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, control_plane(Path(tmp)) as env:
        for mode in args.agree:
            s = summarise(run_job(env, Path(tmp), mode, args.splits, args.step_s, rng))
            rows.append((mode, s))
    print(f"{args.splits} pinned splits per run, 2 gloo ranks paced at {1 / args.step_s:.0f} steps/s; times in ms from issued_unix_s")
    print(f"{'agree':>10} {'delivery p50':>13} {'p99':>7} {'applied p50':>12} {'p99':>7} {'max':>7} {'steps recv->apply p50':>22} {'same step':>10} {'superseded':>11}")
    for k, s in rows:
        d, a, lead = s["delivery"] * 1e3, s["applied"] * 1e3, s["steps_after_receipt"]
        print(f"{k:>10} {np.percentile(d, 50):>13.1f} {np.percentile(d, 99):>7.1f} {np.percentile(a, 50):>12.1f} {np.percentile(a, 99):>7.1f} "
              f"{a.max():>7.1f} {np.percentile(lead, 50):>22.1f} {'yes' if not s['mismatched'] else 'NO x' + str(s['mismatched']):>10} "
              f"{s['superseded']:>11}")
    if len(rows) > 1:
        base = np.percentile(rows[-1][1]["applied"], 50)
        for k, s in rows[:-1]:
            print(f"applied p50, agree {k} over agree {rows[-1][0]}: {np.percentile(s['applied'], 50) / base:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
