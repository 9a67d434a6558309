"""The demo's arrival phase: jobs arrive over time through `gpufair submit`,
more of them than the emulated GPUs hold, once under the Kubernetes default
(preset `k8s`: FIFO, least-loaded, time-slicing, even split) and once under
gpufair's levers (preset `gpufair`).

A job's slow-down counts from its submission to its last step, less its own
start-up (placement to first step: torchrun and imports, which the policy does
not control), over its time alone (measured in the exclusive phase).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as spb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as spb_grpc
from gpufair.client.workloads.emulated import EmuConfig, device_usage
from gpufair.demo.mix import DATA_URI, RunResult, read_stats, utilisation
from gpufair.local.procs import with_parent_death

GPUS = 4
PERIOD_S = 0.5
PROGRESS_S = 3.0  # a progress line this often
SAMPLE_S = 0.5  # the chart's slow-downs this often (a short job runs ~3 s)


@dataclass(frozen=True)
class Arrival:
    name: str
    at_s: float  # submitted this long after the phase starts
    world: int  # GPUs (one rank each)
    global_batch: int
    per_sample_ms: float
    steps: int


# Two long 2-GPU jobs fill the four GPUs; three short ones (one on 2 GPUs)
# arrive while they run: twice the GPUs' worth of demand. Every job keeps its
# GPU busy for ~90 % of a step, as trained models do (Gavel's measured pairs,
# time-sliced, together do about one job's work alone: little idle time to
# fill); the short jobs' kernels are a quarter of the long ones'.
ARRIVALS = (
    Arrival("long-a", 0.0, 2, 64, 4.0, 125),
    Arrival("long-b", 0.0, 2, 64, 4.0, 125),
    Arrival("short-c", 5.0, 1, 16, 2.0, 75),
    Arrival("short-d", 6.5, 2, 32, 2.0, 75),
    Arrival("short-e", 8.0, 1, 16, 2.0, 75),
)


class _Submitted:
    """One `gpufair submit` process and when it said what (read on a thread)."""

    def __init__(self, job: Arrival, job_id: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.job, self.job_id = job, job_id
        self.submitted = self.placed = 0.0
        self.placed_line = ""
        self._log = open(log, "w")
        self.proc = subprocess.Popen(with_parent_death(argv), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._log.write(line)
            if line.startswith("submitted ") and not self.submitted:
                self.submitted = time.time()
            elif line.startswith("placed "):
                self.placed, self.placed_line = time.time(), line.strip()
        self._log.close()

    def done(self) -> bool:
        return self.proc.poll() is not None

    def stop(self) -> None:
        """Ctrl-C, as a user would: the job is withdrawn and its trainers stopped."""
        if self.proc.poll() is None:
            self.proc.send_signal(2)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._reader.join(timeout=5)


def _argv(job: Arrival, job_id: str, rate: float, stats: Path) -> list[str]:
    samples = job.steps * job.global_batch
    return [sys.executable, "-m", "gpufair.client.cli", "submit", "--gpus", str(job.world), "--job", job_id,
            "--samples", str(samples), "--rate", f"{rate:.3f}", "--global-batch", str(job.global_batch), "--model", "demo-mlp",
            "--", "-m", "gpufair.demo.trainer", "--job", job_id, "--data", DATA_URI, "--global-batch", str(job.global_batch),
            "--steps", str(job.steps), "--per-sample-ms", str(job.per_sample_ms), "--exclusive-rate", f"{rate:.3f}",
            "--stats-out", str(stats)]


def run_arrivals(preset: str, env: dict[str, str], workdir: Path, exclusive: dict[str, float]) -> RunResult:
    """Submit ARRIVALS on their schedule under `preset`; one line of progress every few seconds."""
    label = f"arr-{preset}"
    env = dict(env, GPUFAIR_EMU_GPUS=str(GPUS), GPUFAIR_EMU_DIR=str(workdir / f"emu-{label}"))
    logs = workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    channel = grpc.insecure_channel(env["GPUFAIR_SCHEDULER_ADDR"])
    stub = spb_grpc.SchedulerServiceStub(channel)
    stub.SetPolicy(spb.SetPolicyRequest(policy=spb.PolicyConfig(period_s=PERIOD_S, min_change=0.05, preset=preset)),
                   timeout=10)
    t0 = time.time()
    started: list[_Submitted] = []
    series: list[dict] = []
    last_print = last_sample = 0.0
    try:
        pending = list(ARRIVALS)
        while pending or not all(s.done() for s in started):
            now = time.time() - t0
            while pending and pending[0].at_s <= now:
                job = pending.pop(0)
                job_id = f"{job.name}-{label}"
                started.append(_Submitted(job, job_id, _argv(job, job_id, exclusive[job.name], workdir / job_id), env,
                                          logs / f"{job_id}.submit.log"))
            if now > 300:
                raise TimeoutError("arrival-phase jobs did not finish in time")
            if now - last_sample >= SAMPLE_S:
                last_sample = now
                line = _progress(stub, label, now, series)
                if now - last_print >= PROGRESS_S:
                    last_print = now
                    if line:
                        print(line, flush=True)
            time.sleep(0.25)
    finally:
        for s in started:
            s.stop()
        channel.close()
    failed = [s for s in started if s.proc.returncode != 0]
    if failed:
        raise RuntimeError(f"{failed[0].job_id} failed (exit code {failed[0].proc.returncode}); "
                           f"see {logs / (failed[0].job_id + '.submit.log')}")
    return _result(preset, started, workdir, exclusive, env, t0, series)


def _progress(stub: spb_grpc.SchedulerServiceStub, label: str, now: float, series: list[dict]) -> str:
    try:
        jobs = [j for j in stub.ListJobs(spb.ListJobsRequest(), timeout=2).jobs if j.spec.job_id.endswith(label)]
        queue = stub.ListQueue(spb.ListQueueRequest(), timeout=2).entries
    except grpc.RpcError:
        return ""
    queued = [q.job_id for q in queue if q.job_id.endswith(label)]
    for j in jobs:
        series.append({"t": now, "job": j.spec.job_id[:-len(label) - 1], "sd": j.slowdown})
    held = {q for q in queued}
    parts = [f"{j.spec.job_id[:-len(label) - 1]} {j.progress:4.0%}{' held' if j.spec.job_id in held else ''}"
             for j in sorted(jobs, key=lambda j: j.spec.job_id)]
    waiting = len([q for q in queue if q.submitted and q.job_id.endswith(label)])
    return f"  [{label[4:]:>7} {now:5.1f}s] " + (" | ".join(parts) or "-") + (f" | {waiting} waiting for GPUs" if waiting else "")


def _result(preset: str, started: list[_Submitted], workdir: Path, exclusive: dict[str, float], env: dict[str, str],
            t0: float, series: list[dict]) -> RunResult:
    results, waits, ends, every = [], [], [], []
    for s in started:
        ranks = read_stats(workdir / s.job_id, s.job.world)
        every.extend(ranks)
        start, end = min(r["start"] for r in ranks), max(r["end"] for r in ranks)
        ends.append(end)
        startup = max(start - s.placed, 0.0)  # torchrun and imports: the same under any policy
        jct = end - s.submitted - startup
        alone = s.job.steps * s.job.global_batch / exclusive[s.job.name]
        results.append({"job": s.job.name, "sd": round(jct / alone, 3), "jct_s": round(jct, 2), "exclusive_s": round(alone, 2),
                        "waited_s": round(s.placed - s.submitted, 2), "startup_s": round(startup, 2),
                        "placed": s.placed_line})
        waits.extend(r["data_wait_s"] / max(r["end"] - r["start"] + r["resolve_s"], 1e-9) for r in ranks)
    first = min(s.submitted for s in started)
    makespan = max(ends) - first
    cfg = EmuConfig.from_env(env)
    busy = sum(device_usage(cfg, i).busy_s for i in range(GPUS))
    return RunResult(preset, results, utilisation(busy, every, GPUS), statistics.fmean(waits), makespan, series,
                     phase="arrivals", preset=preset, gpu_util_with_startup=busy / (GPUS * makespan))
