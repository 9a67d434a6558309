"""A complete DDP training script with gpufair: the three marked lines are all it adds.

Run two ranks on CPU (gloo) against a local gpufair stack:

    torchrun --nproc-per-node 2 examples/train_ddp.py --job demo-a --global-batch 64 --epochs 2

Without the services it trains the same way (even split), logging that the
control plane is unreachable. Each rank prints once whether it joined gpufair
(job, rank, split); rank 0 prints a progress line every `--log-every` steps
(step, loss, samples/s, the split in force).

`--emu-device 1,2` puts local rank 0 on emulated GPU 1 and local rank 1 on
GPU 2 (GPUFAIR_EMU_GPUS / GPUFAIR_EMU_DIR), shared with other jobs: two
torchrun jobs given overlapping lists reproduce the demo's contention by hand.
A single number is one device for every rank, which only a launcher that
gives each rank its own arguments can use.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import TensorDataset

import gpufair.client


def make_dataset(size: int, dim: int = 32, classes: int = 10, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(size, dim, generator=g)
    w = torch.randn(dim, classes, generator=g)
    return TensorDataset(x, (x @ w).argmax(dim=1))


def emu_device_for(spec: str, local_rank: int, local_world: int) -> int:
    """This local rank's emulated device from `--emu-device` (N, or a list N0,N1,... by LOCAL_RANK)."""
    try:
        devices = [int(d) for d in spec.split(",")]
    except ValueError:
        raise SystemExit(f"--emu-device {spec!r}: expected a device number or a comma-separated list, one per local rank") from None
    if len(devices) == 1 and local_world > 1:
        raise SystemExit(f"--emu-device {spec}: {local_world} local ranks would share one emulated GPU (a job's ranks "
                         f"need one each); give one per local rank, e.g. --emu-device {','.join(map(str, range(local_world)))}")
    if len(devices) > 1 and local_rank >= len(devices):
        raise SystemExit(f"--emu-device {spec}: no device for local rank {local_rank} ({len(devices)} given)")
    return devices[local_rank] if len(devices) > 1 else devices[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--job", default=os.environ.get("GPUFAIR_JOB") or None,
                   help="job id (default: GPUFAIR_JOB, which `gpufair submit` sets)")
    p.add_argument("--global-batch", type=int, default=64)
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--dataset-size", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=256, help="MLP width: the knob for step cost")
    p.add_argument("--emu-device", default=os.environ.get("GPUFAIR_EMU_DEVICES") or None, metavar="N|N0,N1,...",
                   help="emulated GPU of each local rank (a list indexed by LOCAL_RANK; default: "
                   "GPUFAIR_EMU_DEVICES, which `gpufair submit` sets)")
    p.add_argument("--emu-ms-per-sample", type=float, default=0.0,
                   help="with --emu-device: hold the device this long per local sample each step, as a GPU kernel would")
    p.add_argument("--log-every", type=int, default=20, help="rank 0 prints progress every this many steps (0: never)")
    p.add_argument("--stats-out", default="", help="write this rank's own measurements as JSON")
    args = p.parse_args()
    if not args.job:
        p.error("give --job (or run under `gpufair submit`, which sets GPUFAIR_JOB)")

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = None
    if args.emu_device is not None:
        from gpufair.client.workloads.emulated import EmulatedDevice

        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        device = EmulatedDevice.open(emu_device_for(args.emu_device, local_rank, int(os.environ.get("LOCAL_WORLD_SIZE", 1))))
    dataset = make_dataset(args.dataset_size)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = torch.nn.CrossEntropyLoss()

    # gpufair, line 1: join the job (rank 0 registers it with the scheduler).
    session = gpufair.client.init(args.job, args.global_batch, epochs=args.epochs, dataset_size=args.dataset_size,
                                  model=f"mlp-{args.hidden}", emulated_device=device)
    # gpufair, line 2: the elastic loader replaces DataLoader + DistributedSampler.
    loop = session.loop(dataset)
    split = "/".join(map(str, session.initial_split)) or "even"
    joined = "registered with gpufair" if session.registered else "not registered with gpufair (training with the even split)"
    print(f"[{args.job} rank {rank}/{world}] {joined}; split {split}" + (f"; emulated GPU {device.index}" if device else ""), flush=True)
    steps, samples, compute_s, t_start = 0, 0, 0.0, time.time()
    t_log, samples_log = t_start, 0
    whole, frac = int(args.epochs), args.epochs - int(args.epochs)
    for epoch in range(whole + (1 if frac > 0 else 0)):
        limit = loop.sampler.steps_per_epoch if epoch < whole else int(loop.sampler.steps_per_epoch * frac)
        for k, (x, y) in enumerate(loop.epoch(epoch)):
            if k >= limit:
                break
            t0 = time.perf_counter()
            # The emulated GPU is held for the forward pass and the modelled kernel time only:
            # backward's all-reduce waits for this job's other ranks, and a rank that waited
            # holding a shared emulated GPU could wait for ever on a job holding its peer's.
            with session.compute():
                t_held = time.perf_counter()  # waiting for a shared device is not compute
                loss = loss_fn(model(x), y)
                if device is not None and args.emu_ms_per_sample:
                    time.sleep(max(0.0, len(y) * args.emu_ms_per_sample / 1000.0 - (time.perf_counter() - t_held)))
            # gpufair, line 3: weight the loss so uneven splits still average over the global batch.
            loop.scale_loss(loss).backward()
            opt.step()
            opt.zero_grad()
            compute_s += time.perf_counter() - t0
            steps += 1
            samples += len(y)
            if rank == 0 and args.log_every and steps % args.log_every == 0:
                now, plan = time.time(), loop.plan
                done = steps * args.global_batch - samples_log
                print(f"[{args.job}] step {steps}  loss {loss.item():.4f}  {done / max(now - t_log, 1e-9):.0f} samples/s  "
                      f"split {'/'.join(map(str, plan.split)) if plan else split}", flush=True)
                t_log, samples_log = now, steps * args.global_batch
    session.close()
    if args.stats_out:
        with open(f"{args.stats_out}.rank{rank}.json", "w") as fh:
            json.dump({"rank": rank, "steps": steps, "samples": samples, "compute_s": compute_s,
                       "busy_s": session.busy_seconds(), "wall_s": time.time() - t_start,
                       "registered": session.registered}, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("GPUFAIR_LOG_LEVEL", "WARNING")
    sys.exit(main())
