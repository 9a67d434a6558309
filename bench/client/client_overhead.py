"""Step time with gpufair on vs off, with a real control plane: telemetry streaming, commands followed.

"off" is plain DDP with DistributedSampler; "on" is `gpufair.client.init` +
`session.loop` + `loop.scale_loss`, its telemetry streaming to a real metrics
service and its command thread following a real scheduler (etcd, metrics and
scheduler run as child processes). Two gloo ranks on CPU, one thread each, an
MLP step of ~20 ms on a quiet core. Blocks of steps alternate off / on / off2
(a second, identical "off": the A/A ratio off2/off is the noise floor of this
machine), in rotating order; block 0 warms up. Then, in one process and free
of scheduling noise: gpufair's bookkeeping per step (ElasticLoop with the real
telemetry reporter as observer vs DistributedSampler, empty loop body) and the
reporter's `on_step` alone.

    .venv/bin/python bench/client/client_overhead.py [--steps 100] [--blocks 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from controlplane import control_plane  # noqa: E402
from sampler_overhead import (DIM, GLOBAL_BATCH, HIDDEN, N, Alone, Cheap, best_step_times,  # noqa: E402
                              run_baseline, run_gpufair)

CONFIGS = ("off", "on", "off2")


def worker(rank: int, store: str, args: argparse.Namespace, out: str) -> None:
    import gpufair.client

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(DIM, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, DIM)))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    dataset = TensorDataset(torch.randn(N, DIM))
    session = gpufair.client.init("bench-overhead", GLOBAL_BATCH, total_samples=10**9, model="mlp-bench")
    loop = session.loop(dataset)  # the defaults: agreements about every 0.1 s, at most every 10 steps
    runs = {"off": lambda b: run_baseline(model, opt, dataset, rank, args.steps, b),
            "on": lambda b: run_gpufair(loop, model, opt, args.steps, b),
            "off2": lambda b: run_baseline(model, opt, dataset, rank, args.steps, b)}
    times: dict[str, list[float]] = {c: [] for c in CONFIGS}
    for block in range(args.blocks + 1):  # block 0 warms up
        order = CONFIGS[block % 3:] + CONFIGS[:block % 3]
        for name in order:
            t = runs[name](block)
            if block:
                times[name].append(t)
    session.close()
    reporter = session._reporter
    info = {"registered": session.registered, "sent": reporter.sent if reporter else 0, "dropped": reporter.dropped if reporter else 0,
            "agreements": loop.agreement.stats().agreements}
    if rank == 0:
        torch.save({"times": times, "info": info}, out)
    dist.destroy_process_group()


def bookkeeping(metrics_addr: str, rounds: int = 5) -> tuple[float, float, float]:
    """(DistributedSampler, ElasticLoop + real telemetry reporter, reporter.on_step alone), seconds per step."""
    from gpufair.client.telemetry import TelemetryReporter
    from gpufair.client.training import ElasticLoop, StepRecord
    from gpufair.common.channels import sync_channel

    channel = sync_channel(metrics_addr)
    reporter = TelemetryReporter(channel, job_id="bench-bookkeeping", rank=0, node="bench", device_id="cpu-0", global_batch=GLOBAL_BATCH,
                                 total_samples=10**9)
    try:
        base = DataLoader(Cheap(), batch_size=GLOBAL_BATCH // 2, sampler=DistributedSampler(Cheap(), num_replicas=2, rank=0, seed=1, drop_last=True),
                          drop_last=True, collate_fn=list)
        loop = ElasticLoop(Cheap(), GLOBAL_BATCH, rank=0, world_size=2, observers=[reporter], sync_every=10, exchanger=Alone(), collate_fn=list)
        best_base, best_ours = best_step_times(base, loop, rounds)
        n, first = 20_000, 10**6  # steps after the loop's, so the service accepts them
        records = [StepRecord(0, 0, i, first + i, 32, 64, 0, 0.02, 0.001, 0.0, first + i + 1, 64, 32 * (i + 1)) for i in range(n)]
        start = time.perf_counter()
        for record in records:
            reporter.on_step(record)
        on_step = (time.perf_counter() - start) / n
        return best_base, best_ours, on_step
    finally:
        reporter.close()
        channel.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="steps per block")
    parser.add_argument("--blocks", type=int, default=8, help="measured blocks per configuration")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as tmp, control_plane(Path(tmp)) as env:
        os.environ.update(env)  # the spawned ranks read their config from the environment
        out = os.path.join(tmp, "result.pt")
        mp.spawn(worker, args=(os.path.join(tmp, "store"), args, out), nprocs=2, join=True)
        result = torch.load(out, weights_only=False)
        base_s, ours_s, on_step_s = bookkeeping(env["GPUFAIR_METRICS_ADDR"])
    report(result["times"], result["info"], base_s, ours_s, on_step_s)
    return 0


def report(times: dict[str, list[float]], info: dict[str, Any], base_s: float, ours_s: float, on_step_s: float) -> None:
    off = statistics.median(times["off"])
    paired = [on / off_ for on, off_ in zip(times["on"], times["off"])]
    aa = [b / a for a, b in zip(times["off"], times["off2"])]
    print(f"control plane: registered={info['registered']}, telemetry records acknowledged={info['sent']}, dropped={info['dropped']}, "
          f"split agreements={info['agreements']}")
    print(f"{'configuration':<14}{'median step ms':>16}{'ratio to off':>14}")
    for name in CONFIGS:
        med = statistics.median(times[name])
        print(f"{name:<14}{med * 1e3:>16.2f}{med / off:>14.4f}")
    print(f"per-block ratios, median: on/off {statistics.median(paired):.4f}, off2/off (A/A noise floor) {statistics.median(aa):.4f}; "
          f"A/A spread across blocks {min(aa):.3f}..{max(aa):.3f}")
    extra = ours_s - base_s
    print(f"bookkeeping, 1 process, empty body: DistributedSampler {base_s * 1e6:.1f} us/step, ElasticLoop + telemetry reporter "
          f"{ours_s * 1e6:.1f} us/step (extra {extra * 1e6:.1f} us = {extra / off:.3%} of the median 'off' step); "
          f"reporter.on_step alone {on_step_s * 1e6:.1f} us")
    print("per-block step ms:", {k: [round(v * 1e3, 2) for v in vs] for k, vs in times.items()})


if __name__ == "__main__":
    sys.exit(main())
