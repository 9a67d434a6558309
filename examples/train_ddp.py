"""A complete DDP training script with gpufair: the three marked lines are all it adds.

Run two ranks on CPU (gloo) against a local gpufair stack:

    torchrun --nproc-per-node 2 examples/train_ddp.py --job demo-a --global-batch 64 --epochs 2

Without the services it trains the same way (even split), logging that the
control plane is unreachable. `--emu-device N` makes the rank use emulated
GPU N (GPUFAIR_EMU_GPUS / GPUFAIR_EMU_DIR), shared with other jobs.
"""

from __future__ import annotations

import argparse
import json
import os
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--job", required=True)
    p.add_argument("--global-batch", type=int, default=64)
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--dataset-size", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=256, help="MLP width: the knob for step cost")
    p.add_argument("--emu-device", type=int, default=None)
    p.add_argument("--stats-out", default="", help="write this rank's own measurements as JSON")
    args = p.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    device = None
    if args.emu_device is not None:
        from gpufair.client.workloads.emulated import EmulatedDevice

        device = EmulatedDevice.open(args.emu_device)
    dataset = make_dataset(args.dataset_size)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = torch.nn.CrossEntropyLoss()

    # gpufair, line 1: join the job (rank 0 registers it with the scheduler).
    session = gpufair.client.init(args.job, args.global_batch, epochs=args.epochs, dataset_size=args.dataset_size,
                                  model=f"mlp-{args.hidden}", emulated_device=device)
    # gpufair, line 2: the elastic loader replaces DataLoader + DistributedSampler.
    loop = session.loop(dataset)
    steps, samples, compute_s, t_start = 0, 0, 0.0, time.time()
    whole, frac = int(args.epochs), args.epochs - int(args.epochs)
    for epoch in range(whole + (1 if frac > 0 else 0)):
        limit = loop.sampler.steps_per_epoch if epoch < whole else int(loop.sampler.steps_per_epoch * frac)
        for k, (x, y) in enumerate(loop.epoch(epoch)):
            if k >= limit:
                break
            t0 = time.perf_counter()
            with session.compute():
                loss = loss_fn(model(x), y)
                # gpufair, line 3: weight the loss so uneven splits still average over the global batch.
                loop.scale_loss(loss).backward()
                opt.step()
                opt.zero_grad()
            compute_s += time.perf_counter() - t0
            steps += 1
            samples += len(y)
    session.close()
    if args.stats_out:
        with open(f"{args.stats_out}.rank{rank}.json", "w") as fh:
            json.dump({"rank": rank, "steps": steps, "samples": samples, "compute_s": compute_s,
                       "wall_s": time.time() - t_start, "registered": session.registered}, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("GPUFAIR_LOG_LEVEL", "WARNING")
    main()
