"""Per-step overhead of gpufair's elastic sampler + split agreement vs plain DistributedSampler.

Two gloo ranks on CPU train the same MLP (a ~20 ms step) with DDP, alternating
blocks of steps between the baseline (DistributedSampler, fixed batches) and
gpufair (ElasticLoop: elastic sampler, agreement every K steps, loss scaling,
one step observer), so drift on a shared machine hits both alike.

    .venv/bin/python bench/client/sampler_overhead.py [--steps 150] [--blocks 6]
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

DIM, HIDDEN, GLOBAL_BATCH, N = 512, 1536, 64, 64 * 400


class Counter:
    """A stand-in for the telemetry observer: just keeps the last record."""

    def __init__(self) -> None:
        self.last: Any = None
        self.sync_s: list[float] = []

    def on_step(self, record: Any) -> None:
        self.last = record
        self.sync_s.append(record.sync_s)


def step_fn(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, scale: Any) -> None:
    loss = torch.nn.functional.mse_loss(model(x), x)
    scale(loss).backward()
    opt.step()
    opt.zero_grad()


def run_baseline(model, opt, dataset, rank: int, steps: int, epoch: int) -> float:
    sampler = DistributedSampler(dataset, num_replicas=2, rank=rank, seed=1, drop_last=True)
    sampler.set_epoch(epoch)
    loader = DataLoader(dataset, batch_size=GLOBAL_BATCH // 2, sampler=sampler, drop_last=True)
    dist.barrier()
    start = time.perf_counter()
    for i, (x,) in enumerate(loader):
        if i == steps:
            break
        step_fn(model, opt, x, lambda loss: loss)
    return (time.perf_counter() - start) / steps


def run_gpufair(loop, model, opt, steps: int, epoch: int) -> float:
    dist.barrier()
    start = time.perf_counter()
    batches = loop.epoch(epoch)
    for i, (x,) in enumerate(batches):
        if i == steps:
            break
        step_fn(model, opt, x, loop.scale_loss)
    batches.close()
    return (time.perf_counter() - start) / steps


def worker(rank: int, store: str, args: argparse.Namespace, out: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from gpufair.client.training import ElasticLoop

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(DIM, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, DIM))
    )
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    dataset = TensorDataset(torch.randn(N, DIM))
    loops = {k: ElasticLoop(dataset, GLOBAL_BATCH, sync_every=k, sync_every_s=None, observers=[Counter()]) for k in args.every}
    times: dict[str, list[float]] = {"baseline": []} | {f"gpufair K={k}": [] for k in args.every}
    for block in range(args.blocks + 1):  # block 0 warms up
        runs = [("baseline", lambda: run_baseline(model, opt, dataset, rank, args.steps, block))]
        runs += [(f"gpufair K={k}", lambda k=k: run_gpufair(loops[k], model, opt, args.steps, block)) for k in args.every]
        if block % 2:
            runs.reverse()
        for name, fn in runs:
            t = fn()
            if block:
                times[name].append(t)
    sync = {f"gpufair K={k}": statistics.mean(loops[k]._observers[0].sync_s) for k in args.every}
    if rank == 0:
        torch.save({"times": times, "sync": sync}, out)
    dist.destroy_process_group()


class Cheap:
    """A dataset whose items cost nothing, so only sampler and loop bookkeeping are timed."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> int:
        return i


class Alone:
    """Rank 0 of two, the other rank never has a command: the exchange itself costs ~nothing."""

    def start_all_gather(self, row: list[int]) -> Any:
        # Nothing pending, nothing loaded beyond rank 0, the same agreement interval.
        rows = [list(row), [-1, 0, row[2], 0, *([0] * (len(row) - 5)), row[-1]]]
        return lambda: rows


def micro(rounds: int = 5) -> tuple[float, float]:
    """Per-step CPU time (s) of iterating the loaders with an empty body: (baseline, gpufair)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from gpufair.client.training import ElasticLoop

    collate = list  # keep collation out of the comparison
    base_loader = DataLoader(
        Cheap(),
        batch_size=GLOBAL_BATCH // 2,
        sampler=DistributedSampler(Cheap(), num_replicas=2, rank=0, seed=1, drop_last=True),
        drop_last=True,
        collate_fn=collate,
    )
    loop = ElasticLoop(
        Cheap(), GLOBAL_BATCH, rank=0, world_size=2, observers=[Counter()], sync_every=1,
        exchanger=Alone(), collate_fn=collate,
    )
    return best_step_times(base_loader, loop, rounds)


def best_step_times(base_loader: Any, loop: Any, rounds: int) -> tuple[float, float]:
    """Best seconds per step over `rounds` epochs: plain loader, then gpufair's loop."""
    best_base = best_ours = float("inf")
    for epoch in range(rounds):
        start = time.perf_counter()
        steps = sum(1 for _ in base_loader)
        best_base = min(best_base, (time.perf_counter() - start) / steps)
        start = time.perf_counter()
        steps = sum(1 for _ in loop.epoch(epoch))
        best_ours = min(best_ours, (time.perf_counter() - start) / steps)
    return best_base, best_ours


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="steps per block")
    parser.add_argument("--blocks", type=int, default=8, help="measured blocks per configuration")
    parser.add_argument("--every", type=int, nargs="+", default=[1, 10], help="agreement intervals K")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.pt")
        mp.spawn(worker, args=(os.path.join(tmp, "store"), args, out), nprocs=2, join=True)
        result = torch.load(out, weights_only=False)
    times, sync = result["times"], result["sync"]
    base = statistics.median(times["baseline"])
    print(f"{'configuration':<16}{'median step ms':>16}{'ratio':>9}{'agreement ms/step':>20}")
    for name, values in times.items():
        med = statistics.median(values)
        agree = f"{sync[name] * 1e3:.3f}" if name in sync else "-"
        print(f"{name:<16}{med * 1e3:>16.2f}{med / base:>9.4f}{agree:>20}")
    base_us, ours_us = (t * 1e6 for t in micro())
    print(
        f"bookkeeping, 1 process, empty body: DistributedSampler {base_us:.1f} us/step, "
        f"ElasticLoop {ours_us:.1f} us/step (32-sample batch, agreement logic every step); "
        f"extra {ours_us - base_us:.1f} us = {(ours_us - base_us) / 200:.2f} % of a 20 ms step"
    )
    print("per-block step ms:", {k: [round(v * 1e3, 2) for v in vs] for k, vs in times.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
