"""Emulated shared GPUs: the slow-down when k processes share one device.

    .venv/bin/python bench/workloads/bench_emulated.py [--window 3] [--max-sharers 4]

Each process does real single-thread torch matmuls inside `dev.compute()`. Ratios are
against a process alone on a device, measured in the same run; the ideal for k sharers
is 1/k each (and k x 1/k = 1 together).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from gpufair.client.workloads.emulated import EmuConfig, EmulatedDevice


def _worker(pos: int, directory: str, speeds: tuple[float, ...], index: int, size: int,
            barrier: Any, window_s: float, results: Any) -> None:
    import torch

    torch.set_num_threads(1)
    a = torch.randn(size, size)
    with EmulatedDevice.open(index, EmuConfig(dir=Path(directory), speeds=speeds)) as dev:
        for _ in range(3):
            with dev.compute():
                a @ a
        barrier.wait(timeout=120)
        steps, end = 0, time.monotonic() + window_s
        while time.monotonic() < end:
            with dev.compute():
                (a @ a).sum().item()
            steps += 1
    results.put((pos, steps / window_s))


def _run(directory: str, speeds: tuple[float, ...], placement: list[int], size: int,
         window_s: float) -> list[float]:
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(len(placement)), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(pos, directory, speeds, i, size, barrier, window_s, results))
             for pos, i in enumerate(placement)]
    for p in procs:
        p.start()
    by_pos = dict(results.get(timeout=300) for _ in procs)
    for p in procs:
        p.join()
    return [by_pos[pos] for pos in range(len(placement))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=float, default=3.0)
    ap.add_argument("--max-sharers", type=int, default=4)
    ap.add_argument("--size", type=int, default=384)
    args = ap.parse_args()
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    speeds = (1.0, 1.0, 0.5)
    # The baseline is a process alone on device 1 in the *same* window, so machine load
    # (this is a shared 2-core box) hits the baseline and the measured processes alike.
    with tempfile.TemporaryDirectory(dir=base) as d:
        print(f"{'sharers':>8}{'each (ratio to lone process)':>34}{'together':>10}{'ideal each':>11}"
              f"{'lone steps/s':>14}")
        for k in range(1, args.max_sharers + 1):
            *rates, alone = _run(d, speeds, [0] * k + [1], args.size, args.window)
            each = " ".join(f"{r / alone:.2f}" for r in rates)
            print(f"{k:>8}{each:>34}{sum(rates) / alone:>10.2f}{1 / k:>11.2f}{alone:>14.1f}")
        slow, alone = _run(d, speeds, [2, 1], args.size, args.window)
        print(f"alone on a 0.5-speed device: {slow / alone:.2f} of a lone full-speed process (ideal 0.50)")

if __name__ == "__main__":
    main()
