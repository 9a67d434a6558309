"""The scheduler's registry read at scale: ListJobs and a decision round's read of
every job, 4,000 jobs x 8 ranks mirrored from a real etcd, against the
registry of a baseline revision (default `main`) in the same run.

    .venv/bin/python bench/registry/bench_registry.py [--jobs 4000] [--ranks 8] [--repeat 20] [--baseline-rev main]

What is timed (in-process, no network between the servicer and the caller;
the metrics "service" answers at once, profiles come from the real etcd):
- "round's registry read": `registry.views()`, what each decision round and
  each ListJobs read of the registry;
- "ListJobs": the servicer's whole ListJobs (registry read, figures, protobuf
  answer), with no telemetry yet and with every job reporting; the baseline
  column runs the previous ListJobs in the same process: per call, profiles
  from etcd and the per-job slow-down estimates of every job (`build_snapshot`),
  then the protobuf answer built from scratch;
- "figures refresh": what replaces those per-call estimates, once per
  decision period in the background (metrics, estimates, summaries rebuilt).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.common.etcd import EtcdState
from gpufair.common.keys import Keys
from gpufair.common.tokens import JobTokens
from gpufair.local import EtcdServer
from gpufair.scheduler.hub import CommandHub
from gpufair.scheduler.jobs import JobSpec, Placement, Split
from gpufair.scheduler.lifecycle import JobLife, Phase
from gpufair.scheduler.loop import DecisionLoop
from gpufair.scheduler.profiles import ProfileStore
from gpufair.scheduler.registry import JobRegistry
from gpufair.scheduler.servicer import SchedulerServicer
from gpufair.scheduler.figures import Figures
from gpufair.scheduler.snapshot import JobMetrics, RankMetrics, build_snapshot
from gpufair.scheduler.summaries import fill_summary
from gpufair.scheduler.sources import PolicySettings, PolicyStore

REPO = Path(__file__).resolve().parents[2]
TXN_OPS = 128  # etcd's default --max-txn-ops


async def load(state: EtcdState, keys: Keys, jobs: int, ranks: int) -> int:
    """Write `jobs` running registrations with a split and `ranks` live members each; returns the key count."""
    kv: list[tuple[str, dict]] = []
    started = time.time() - 60.0
    for j in range(jobs):
        job = f"job-{j:05d}"
        spec = JobSpec(job, "resnet50", 32 * ranks, 10**7, tuple(Placement(r, f"node-{j % 500}", f"gpu-{j}-{r}", "h200")
                                                                  for r in range(ranks)))
        kv.append((keys.job_spec(job), spec.to_json()))
        kv.append((keys.job_split(job), Split(1, 0, (32,) * ranks, "even", "bench", 0.0).to_json()))
        kv.append((keys.job_life(job), JobLife(2, Phase.RUNNING, started - 1.0, started, first_split_version=1).to_json()))
        kv += [(keys.job_member(job, r), {"rank": r, "replica": "bench", "stream": "s", "since": 0.0}) for r in range(ranks)]
    tx = state.client.transactions
    for i in range(0, len(kv), TXN_OPS):
        await state.client.transaction(compare=[], success=[tx.put(k.encode(), json.dumps(v).encode()) for k, v in kv[i:i + TXN_OPS]],
                                       failure=[])
    return len(kv)


def baseline_module(rev: str) -> ModuleType | None:
    """`services/scheduler/registry.py` as it was at `rev`, importable next to today's code."""
    try:
        source = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:services/scheduler/registry.py"],
                                capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"no baseline: cannot read the registry at {rev!r} ({exc})", file=sys.stderr)
        return None
    path = Path(tempfile.mkdtemp()) / "baseline_registry.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("baseline_registry", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


async def timed(fn: Callable[[], Awaitable[Any] | Any], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        if asyncio.iscoroutine(result):
            await result
        out.append(time.perf_counter() - t0)
    return out


def telemetry(jobs: int, ranks: int) -> dict[str, JobMetrics]:
    """Every job training: what the metrics service reports when the cluster is busy."""
    return {f"job-{j:05d}": JobMetrics(500.0, 10_000, 1.0, {r: RankMetrics(1e-3, 1e-3, 100) for r in range(ranks)}, 2.0)
            for j in range(jobs)}


async def measure(registry: Any, state: EtcdState, keys: Keys, repeat: int, expect: int,
                  busy: dict[str, JobMetrics]) -> dict[str, float]:
    """Median seconds of a round's registry read, of ListJobs (this tree's and the
    per-call-estimates one) with no telemetry and with every job busy, and of a refresh."""
    registry.start_background()
    t0 = time.perf_counter()
    if not await registry.wait_ready(300):
        raise RuntimeError("the registry did not read etcd in time")
    mirror_s = time.perf_counter() - t0
    metrics: dict[str, JobMetrics] = {}

    async def fetch_metrics() -> dict[str, JobMetrics]:
        return metrics  # answers at once: only the scheduler's own work is timed

    class _Standby:
        is_leader = False

    policies = PolicyStore(state, keys, PolicySettings("even", 5.0, 0.05))
    profiles = ProfileStore(state, keys)
    loop = DecisionLoop(state, keys, registry, _Standby(), policies, fetch_metrics, profiles.fits)
    servicer = SchedulerServicer(registry, CommandHub(), loop, policies, profiles, JobTokens("s"), "bench")
    list_all = pb.ListJobsRequest(include_finished=True)

    async def per_call_listjobs() -> pb.ListJobsResponse:
        """The previous ListJobs: estimates of every job and a fresh protobuf answer on every call."""
        views, now = registry.views(), time.time()
        _, est = build_snapshot(views, metrics, await profiles.fits(), now)
        out = pb.ListJobsResponse()
        for v in views:
            fill_summary(out.jobs.add(), v, Figures(est[v.spec.job_id], False, now))
        return out

    assert len(registry.views()) == expect, "the mirror does not hold every job"
    out = {"mirror_s": mirror_s, "round_read_s": statistics.median(await timed(registry.views, repeat))}
    for label, fill in (("idle", {}), ("busy", busy)):
        metrics.update(fill)
        out[f"refresh_{label}_s"] = statistics.median(await timed(loop.refresh, max(repeat // 4, 1)))
        out[f"list_{label}_s"] = statistics.median(await timed(lambda: servicer.ListJobs(list_all, None), repeat))
        out[f"list_{label}_old_s"] = statistics.median(await timed(per_call_listjobs, max(repeat // 4, 1)))
    listed = (await servicer.ListJobs(list_all, None)).jobs
    assert len(listed) == expect and listed[0].samples_per_s == 500.0, "ListJobs does not show the busy figures"
    # The same figures both ways (their clocks differ by the time between the two calls).
    assert math.isclose((await per_call_listjobs()).jobs[0].slowdown, listed[0].slowdown, rel_tol=0.01)
    await registry.stop()
    return out


async def main(args: argparse.Namespace) -> None:
    keys = Keys("/bench-registry")
    with tempfile.TemporaryDirectory() as tmp:
        server = EtcdServer(workdir=Path(tmp) / "etcd").start()
        state = EtcdState(server.endpoint, timeout=30)
        try:
            t0 = time.perf_counter()
            n = await load(state, keys, args.jobs, args.ranks)
            print(f"{args.jobs} jobs x {args.ranks} ranks: {n} keys written to etcd in {time.perf_counter() - t0:.1f}s")
            busy = telemetry(args.jobs, args.ranks)
            new = await measure(JobRegistry(state, keys), state, keys, args.repeat, args.jobs, busy)
            old_module = baseline_module(args.baseline_rev) if args.baseline_rev else None
            old = await measure(old_module.JobRegistry(state, keys), state, keys, args.baseline_repeat, args.jobs, busy) \
                if old_module else None
        finally:
            await state.close()
            server.close()
    print(f"{'':<34}{'this tree':>12}{'baseline':>20}{'ratio':>10}")
    rows = [("round's registry read", new["round_read_s"], old["round_read_s"] if old else None, f"registry at {args.baseline_rev}")]
    for label, name in (("idle", "no telemetry"), ("busy", "every job busy")):
        rows.append((f"ListJobs, {name}", new[f"list_{label}_s"], new[f"list_{label}_old_s"], "per-call estimates"))
        rows.append((f"  figures refresh (per period)", new[f"refresh_{label}_s"], None, ""))
    rows.append(("first full read (mirror)", new["mirror_s"], old["mirror_s"] if old else None, f"registry at {args.baseline_rev}"))
    for label, value, base, what in rows:
        line = f"{label:<34}{value * 1e3:>10.1f}ms"
        if base is not None:
            line += f"{base * 1e3:>18.1f}ms{base / value:>9.0f}x  ({what})"
        print(line)
    print(f"(medians of {args.repeat} ListJobs calls and registry reads, {max(args.repeat // 4, 1)} refreshes and per-call "
          f"estimates" + (f"; baseline registry {args.baseline_repeat} run)" if old else ")"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=20, help="timed runs of this tree's code (median)")
    parser.add_argument("--baseline-rev", default="main", help="git revision of the baseline registry ('' for none)")
    parser.add_argument("--baseline-repeat", type=int, default=1, help="timed runs of the baseline (it is slow)")
    asyncio.run(main(parser.parse_args()))
