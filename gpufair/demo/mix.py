"""The demo's job mix and one run of it under a policy, with a live progress view."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import grpc

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as spb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as spb_grpc
from gpufair.client.workloads.emulated import EmuConfig, device_usage
from gpufair.local.launch import LocalJob, launch

DATA_URI = "s3://gpufair-demo/images/"


@dataclass(frozen=True)
class DemoJob:
    name: str
    global_batch: int
    per_sample_ms: float
    devices: tuple[int, ...]  # emulated device of each rank when the jobs share GPUs
    steps: int

    @property
    def world(self) -> int:
        return len(self.devices)


class JobKind(Protocol):
    """What the exclusive phase needs of a job (`DemoJob`, `arrivals.Arrival`)."""

    name: str
    global_batch: int
    per_sample_ms: float

    @property
    def world(self) -> int: ...


# Three 2-rank jobs on four emulated GPUs; GPU 1 hosts a rank of every job.
MIX = (
    DemoJob("job-a", 64, 1.0, (0, 1), 400),
    DemoJob("job-b", 64, 0.6, (1, 2), 500),
    DemoJob("job-c", 48, 1.5, (1, 3), 300),
)
SHARED_GPUS = 4


@dataclass
class RunResult:
    policy: str
    jobs: list[dict]
    gpu_util: float  # `utilisation`: from each GPU's first step
    data_wait: float
    makespan_s: float
    series: list[dict] = field(default_factory=list)
    phase: str = "layout"  # `layout`: fixed GPUs, split policy only; `arrivals`: jobs submitted over time
    preset: str = ""  # the levers: `k8s` (the Kubernetes default) or `gpufair`
    gpu_util_with_startup: float = 0.0  # busy time over GPUs x makespan, the first jobs' start-up included

    @property
    def max_sd(self) -> float:
        return max(j["sd"] for j in self.jobs)

    @property
    def mean_sd(self) -> float:
        return statistics.fmean(j["sd"] for j in self.jobs)

    def to_json(self) -> dict:
        return {"phase": self.phase, "preset": self.preset, "policy": self.policy, "max_sd": round(self.max_sd, 3), "mean_sd": round(self.mean_sd, 3), "gpu_util": round(self.gpu_util, 3),
                "gpu_util_with_startup": round(self.gpu_util_with_startup, 3), "data_wait": round(self.data_wait, 4), "makespan_s": round(self.makespan_s, 2), "jobs": self.jobs}


def _trainer_args(job: JobKind, job_id: str, devices: tuple[int, ...], steps: int, stats: Path, extra: list[str]) -> list[str]:
    return ["-m", "gpufair.demo.trainer", "--job", job_id, "--data", DATA_URI, "--global-batch", str(job.global_batch),
            "--steps", str(steps), "--per-sample-ms", str(job.per_sample_ms), "--devices", ",".join(map(str, devices)),
            "--stats-out", str(stats), *extra]


def read_stats(stats: Path, world: int) -> list[dict]:
    return [json.loads(Path(f"{stats}.rank{r}.json").read_text()) for r in range(world)]


def utilisation(busy_s: float, ranks: Sequence[dict], gpus: int) -> float:
    """Busy time over each GPU's time from the first step a rank took on it to the
    last rank's end. Start-up (torchrun, imports: seconds, the same under any
    policy) is left out as slow-down leaves it out; a GPU no rank stepped on
    counts from the first step anywhere."""
    end = max(r["end"] for r in ranks)
    first = min(r["start"] for r in ranks)
    since = {g: min((r["start"] for r in ranks if r["device"] == g), default=first) for g in range(gpus)}
    window = sum(end - t for t in since.values())
    return busy_s / window if window > 0 else 0.0


def _wait_all(jobs: list[LocalJob], timeout: float, on_tick=None) -> None:
    deadline = time.monotonic() + timeout
    while any(j.alive() for j in jobs):
        if time.monotonic() > deadline:
            raise TimeoutError("demo jobs did not finish in time")
        if on_tick:
            on_tick()
        time.sleep(0.5)
    for j in jobs:
        codes = j.wait(5)
        if any(codes):
            raise RuntimeError(f"{j.name} failed (exit codes {codes}):\n{j.logs()}")


def measure_exclusive(env: dict[str, str], workdir: Path, kinds: Sequence[JobKind] = MIX, steps: int = 40
                      ) -> dict[str, float]:
    """Each job alone on its own emulated GPUs: its exclusive speed in samples/s (the profiler's role)."""
    n = sum(j.world for j in kinds)
    env = dict(env, GPUFAIR_EMU_GPUS=str(n), GPUFAIR_EMU_DIR=str(workdir / "emu-exclusive"))
    # The jobs step together, so each is measured beside the others' CPU work as in
    # the shared runs, not beside their start-up (a fast job's 40 steps take a second).
    go = workdir / f"exclusive-{len(kinds)}-{kinds[0].name}.go"
    jobs, next_dev = [], 0
    for job in kinds:
        devs = tuple(range(next_dev, next_dev + job.world))
        next_dev += len(devs)
        stats = workdir / f"{job.name}-exclusive"
        jobs.append(launch(f"{job.name}-exclusive", _trainer_args(job, f"{job.name}-exclusive", devs, steps, stats,
                                                                  ["--no-gpufair", "--start-file", str(go)]),
                           len(devs), workdir / "logs", env))

    def start_when_ready() -> None:  # or at once when one failed: its error is reported, not a timeout
        if not go.exists() and (len(list(workdir.glob(f"{go.name}.*"))) >= n or not all(j.alive() for j in jobs)):
            go.touch()

    try:
        _wait_all(jobs, 180, start_when_ready)
    finally:
        for j in jobs:
            j.kill()
    rates = {}
    for job in kinds:
        ranks = read_stats(workdir / f"{job.name}-exclusive", job.world)
        # Synchronous steps: a step takes as long as its slowest rank; skip warm-up.
        step_s = statistics.median(max(ts) for ts in zip(*(r["step_times"][5:] for r in ranks)))
        rates[job.name] = job.global_batch / step_s
    return rates


def run_mix(policy: str, env: dict[str, str], workdir: Path, exclusive: dict[str, float], label: str, preset: str
            ) -> RunResult:
    """Run the mix on shared emulated GPUs under split `policy` (the layout is fixed: the
    `preset` names which levers it stands for), showing live progress."""
    emu_dir = workdir / f"emu-{label}"
    env = dict(env, GPUFAIR_EMU_GPUS=str(SHARED_GPUS), GPUFAIR_EMU_DIR=str(emu_dir))
    channel = grpc.insecure_channel(env["GPUFAIR_SCHEDULER_ADDR"])
    stub = spb_grpc.SchedulerServiceStub(channel)
    stub.SetPolicy(spb.SetPolicyRequest(policy=spb.PolicyConfig(name=policy, period_s=1.0, min_change=0.05)), timeout=10)
    t0 = time.time()
    jobs = []
    for job in MIX:
        stats = workdir / f"{job.name}-{label}"
        jobs.append(launch(f"{job.name}-{label}", _trainer_args(job, f"{job.name}-{label}", job.devices, job.steps, stats,
                                                                ["--exclusive-rate", f"{exclusive[job.name]:.3f}"]),
                           len(job.devices), workdir / "logs", env))
    series: list[dict] = []
    last_print = [0.0]

    def tick() -> None:
        try:
            listed = stub.ListJobs(spb.ListJobsRequest(include_finished=True), timeout=2).jobs
        except grpc.RpcError:
            return
        now = time.time() - t0
        mine = [j for j in listed if j.spec.job_id.endswith(f"-{label}")]
        for j in mine:
            series.append({"t": now, "job": j.spec.job_id.rsplit("-", 1)[0], "sd": j.slowdown, "split": list(j.split.batch_sizes)})
        if now - last_print[0] >= 2.0 and mine:
            last_print[0] = now
            parts = [f"{j.spec.job_id.rsplit('-', 1)[0]} {j.progress:4.0%} split {'/'.join(map(str, j.split.batch_sizes)):>7} "
                     f"SD {f'{j.slowdown:4.2f}' if j.slowdown > 0 else '   -'}"
                     for j in sorted(mine, key=lambda j: j.spec.job_id)]
            print(f"  [{label:>4} {now:5.1f}s] " + " | ".join(parts), flush=True)

    try:
        _wait_all(jobs, 600, tick)
    finally:
        for j in jobs:
            j.kill()
        for job in MIX:
            try:
                stub.DeregisterJob(spb.DeregisterJobRequest(job_id=f"{job.name}-{label}"), timeout=5)
            except grpc.RpcError:
                pass
        channel.close()
    results, waits, ends, every = [], [], [], []
    for job in MIX:
        ranks = read_stats(workdir / f"{job.name}-{label}", len(job.devices))
        every.extend(ranks)
        # Completion time from the job's first step (start-up, identical in both runs, is left out).
        start, end = min(r["start"] for r in ranks), max(r["end"] for r in ranks)
        ends.append(end)
        jct = end - start
        alone = job.steps * job.global_batch / exclusive[job.name]
        results.append({"job": job.name, "sd": round(jct / alone, 3), "jct_s": round(jct, 2), "exclusive_s": round(alone, 2)})
        waits.extend(r["data_wait_s"] / max(r["end"] - r["start"] + r["resolve_s"], 1e-9) for r in ranks)
    makespan = max(ends) - t0
    cfg = EmuConfig.from_env(env)
    busy = sum(device_usage(cfg, i).busy_s for i in range(SHARED_GPUS))
    return RunResult(policy, results, utilisation(busy, every, SHARED_GPUS), statistics.fmean(waits), makespan, series,
                     preset=preset, gpu_util_with_startup=busy / (SHARED_GPUS * makespan))


