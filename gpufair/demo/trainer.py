"""One rank of a demo job: real DDP training over gloo on an emulated, shared GPU.

The emulated GPU is held for the step's local compute (forward, backward),
padded to a modelled kernel time (`--fixed-ms + --per-sample-ms * local batch`,
scaled by the device's speed), so jobs that share a device really wait for each
other. The gradient all-reduce starts once the gradients exist and runs during
the rest of the kernel time, as DDP's bucketed all-reduce overlaps backward; it
is waited for after the device is released, as on a real GPU where waiting for
a straggling peer leaves the device idle.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

import gpufair.client
from gpufair.common import env
from gpufair.client.workloads.emulated import EmulatedDevice
from gpufair.demo.data import load_local


LR = 0.1


class DataWait:
    """Sums the time the loop waited for batches."""

    def __init__(self) -> None:
        self.total = 0.0

    def on_step(self, record) -> None:  # noqa: ANN001 - a gpufair.client.StepRecord
        self.total += record.data_wait_s


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--job", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--global-batch", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--per-sample-ms", type=float, required=True)
    p.add_argument("--fixed-ms", type=float, default=2.0)
    p.add_argument("--devices", default=env.EMU_DEVICES.read() or None,
                   help="comma-separated emulated device index per rank (default GPUFAIR_EMU_DEVICES, as `gpufair submit` "
                        "sets it)")
    p.add_argument("--exclusive-rate", type=float, default=0.0)
    p.add_argument("--stats-out", required=True)
    p.add_argument("--no-gpufair", action="store_true", help="measure exclusive speed without the control plane")
    p.add_argument("--start-file", default="", help="mark `<file>.<job>.<rank>` when ready, then wait for the file "
                                                     "itself before the first step (jobs measured together start together)")
    args = p.parse_args()
    if not args.devices:
        p.error("give --devices (or run under `gpufair submit`, which sets GPUFAIR_EMU_DEVICES)")

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = EmulatedDevice.open(int(args.devices.split(",")[rank]))
    t_resolve = time.time()
    dataset = load_local(gpufair.client.resolve_dataset(args.data, wait_s=120))
    resolve_s = time.time() - t_resolve
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(768, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    params = list(model.parameters())
    loss_fn = torch.nn.CrossEntropyLoss()
    config = gpufair.client.ClientConfig.from_env()
    if args.no_gpufair:
        from dataclasses import replace

        config = replace(config, enabled=False)
    session = gpufair.client.init(args.job, args.global_batch, total_samples=args.steps * args.global_batch, model="demo-mlp",
                                  emulated_device=device, exclusive_rate=args.exclusive_rate, config=config)
    waits = DataWait()
    loop = session.loop(dataset, observers=[waits])
    dist.barrier()  # every rank ready: training starts now
    if args.start_file:
        Path(f"{args.start_file}.{args.job}.{rank}").touch()
        while not os.path.exists(args.start_file):
            time.sleep(0.01)
    step, step_times, t_start = 0, [], time.time()
    speed = device.config.speeds[device.index]
    epoch = 0
    while step < args.steps:
        for x, y in loop.epoch(epoch):
            t0 = time.perf_counter()
            with session.compute():
                t_held = time.perf_counter()  # waiting for the device is not kernel time
                loss = loss_fn(model(x), y)
                loop.scale_loss(loss).backward()
                # The all-reduce starts once the gradients exist and runs beside the rest
                # of the kernel time, as DDP's bucketed all-reduce overlaps backward.
                flat = torch.cat([q.grad.reshape(-1) for q in params])
                reduced = dist.all_reduce(flat, async_op=True)
                kernel = (args.fixed_ms + args.per_sample_ms * len(y)) / 1000.0 / speed
                pad = kernel - (time.perf_counter() - t_held)
                if pad > 0:
                    time.sleep(pad)  # the GPU kernel's remaining time, device held
            # Waited for with the device released: waiting for a straggling peer idles it,
            # and a rank never waits on a collective while holding a device another needs.
            reduced.wait()
            # Mean of the scaled per-rank gradients = gradient of the global-batch mean.
            flat.div_(world)
            offset = 0
            for q in params:
                q.grad.copy_(flat[offset:offset + q.numel()].view_as(q))
                offset += q.numel()
            with torch.no_grad():  # plain SGD: torch.optim's first use imports torch._dynamo, ~1 s of start-up
                for q in params:
                    q.add_(q.grad, alpha=-LR)
                    q.grad = None
            step_times.append(time.perf_counter() - t0)
            step += 1
            if step >= args.steps:
                break
        epoch += 1
    dist.barrier()
    t_end = time.time()
    session.close()
    with open(f"{args.stats_out}.rank{rank}.json", "w") as fh:
        json.dump({"rank": rank, "world": world, "device": device.index, "steps": step, "start": t_start, "end": t_end, "loss": loss.detach().item(),
                   "step_times": step_times[-200:], "data_wait_s": waits.total + resolve_s,
                   "resolve_s": resolve_s, "launched_to_start_s": t_start - t_resolve}, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
