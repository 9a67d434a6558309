"""Load test: hundreds of simulated ranks over tens of jobs against real metrics + scheduler processes.

    .venv/bin/python bench/load/run_load.py --jobs 30 --ranks 8 --procs 3 --duration 60

Reports records/s ingested, the decision period actually held (ExplainDecision
spacing), p50/p99 command latency (SplitCommand.issued_unix_s -> received),
service RSS at start vs end, and the largest backlog of unacknowledged
telemetry batches (a queue that grows shows up there).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_trainers import SimJob, run_process  # noqa: E402

from gpufair.api.metrics.v1 import metrics_service_pb2 as mpb  # noqa: E402
from gpufair.api.metrics.v1 import metrics_service_pb2_grpc as mpb_grpc  # noqa: E402
from gpufair.api.scheduler.v1 import scheduler_service_pb2 as spb  # noqa: E402
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as spb_grpc  # noqa: E402
from gpufair.local import EtcdServer  # noqa: E402
from gpufair.local.stack import start_service  # noqa: E402


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def make_jobs(n_jobs: int, ranks: int, seed: int = 0) -> list[SimJob]:
    """Jobs placed on 3/4 as many devices as ranks, so devices are shared and some are slower."""
    rng = random.Random(seed)
    n_dev = max(1, n_jobs * ranks * 3 // 4)
    speed = [rng.choice([1.0, 1.0, 1.5, 2.5]) for _ in range(n_dev)]
    placement = [rng.sample(range(n_dev), min(ranks, n_dev)) for _ in range(n_jobs)]  # distinct devices within a job
    load = [0] * n_dev
    for devs in placement:
        for d in devs:
            load[d] += 1
    return [SimJob(f"load-{j:03d}", tuple(f"dev-{d}" for d in devs), 32 * ranks, tuple(0.0005 * speed[d] * load[d] for d in devs))
            for j, devs in enumerate(placement)]


async def watch_services(saddr: str, maddr: str, pids: dict[str, int], until: float, period_s: float) -> dict:
    decided: list[float] = []
    rss = {name: [rss_mib(pid)] for name, pid in pids.items()}
    async with grpc.aio.insecure_channel(saddr) as sch, grpc.aio.insecure_channel(maddr) as mch:
        sstub, mstub = spb_grpc.SchedulerServiceStub(sch), mpb_grpc.MetricsServiceStub(mch)
        next_rss = time.time() + 5
        while time.time() < until:
            d = (await sstub.ExplainDecision(spb.ExplainDecisionRequest())).decision.decided_unix_s
            if d and (not decided or d != decided[-1]):
                decided.append(d)
            if time.time() >= next_rss:
                for name, pid in pids.items():
                    rss[name].append(rss_mib(pid))
                next_rss += 5
            await asyncio.sleep(period_s / 4)
        jobs = len((await mstub.ListJobStats(mpb.ListJobStatsRequest())).jobs)
    for name, pid in pids.items():
        rss[name].append(rss_mib(pid))
    gaps = [b - a for a, b in zip(decided, decided[1:])]
    return {"rounds": len(decided), "gap_s": gaps, "rss_mib": rss, "jobs_seen_by_metrics": jobs}


def pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--jobs", type=int, default=30)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--procs", type=int, default=3, help="simulator processes")
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--steps-per-s", type=float, default=5.0)
    p.add_argument("--flush-s", type=float, default=0.5)
    p.add_argument("--period", type=float, default=2.0, help="scheduler decision period")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    work = Path(tempfile.mkdtemp(prefix="gpufair-load-"))
    etcd = EtcdServer(workdir=work / "etcd").start()
    env = dict(os.environ, GPUFAIR_ETCD=etcd.endpoint, GPUFAIR_LISTEN="127.0.0.1:0", GPUFAIR_LOG_LEVEL="WARNING", GPUFAIR_PERIOD_S=str(args.period),
               GPUFAIR_POLICY="sd-maxmin", GPUFAIR_LEASE_TTL="5", GPUFAIR_NODE="load")
    metrics, mport = start_service("gpufair.metrics", env, work / "metrics.log")
    env["GPUFAIR_METRICS_ADDR"] = maddr = f"127.0.0.1:{mport}"
    sched, sport = start_service("gpufair.scheduler", env, work / "scheduler.log")
    saddr = f"127.0.0.1:{sport}"
    jobs = make_jobs(args.jobs, args.ranks)
    try:
        t0 = time.time()
        with ProcessPoolExecutor(args.procs) as pool:
            futures = [pool.submit(run_process, maddr, saddr, jobs[i::args.procs], args.duration, args.steps_per_s, args.flush_s)
                       for i in range(args.procs)]
            watched = asyncio.run(watch_services(saddr, maddr, {"metrics": metrics.proc.pid, "scheduler": sched.proc.pid},
                                                 t0 + args.duration, args.period))
            parts = [f.result() for f in futures]
        elapsed = time.time() - t0
    finally:
        sched.stop()
        metrics.stop()
        etcd.close()
    lat = [x for part in parts for x in part["latencies_s"]]
    gaps = watched["gap_s"]
    report = {
        "ranks": args.jobs * args.ranks, "jobs": args.jobs, "duration_s": round(elapsed, 1),
        "records_per_s": round(sum(p["records_acked"] for p in parts) / elapsed),
        "records_sent": sum(p["records_sent"] for p in parts), "records_acked": sum(p["records_acked"] for p in parts),
        "max_unacked_batches_per_stream": max(p["max_unacked_batches"] for p in parts),
        "decision_rounds": watched["rounds"], "period_s": args.period,
        "round_gap_s": {"median": round(statistics.median(gaps), 2) if gaps else None, "max": round(max(gaps), 2) if gaps else None},
        "commands": len(lat), "cmd_latency_ms": {"p50": round(pct(lat, 0.5) * 1000, 1), "p99": round(pct(lat, 0.99) * 1000, 1)},
        "rss_mib": {k: {"start": round(v[0], 1), "half": round(v[len(v) // 2], 1), "end": round(v[-1], 1)} for k, v in watched["rss_mib"].items()},
        "client_errors": sum(p["errors"] for p in parts), "jobs_seen_by_metrics": watched["jobs_seen_by_metrics"],
    }
    print(json.dumps(report, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
