"""Child-process bodies for the emulated-device tests (spawned, so importable by name)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from gpufair.client.workloads.emulated import EmuConfig, EmulatedDevice


def config(directory: str, speeds: tuple[float, ...]) -> EmuConfig:
    return EmuConfig(dir=Path(directory), speeds=speeds, host="test")


def train_steps(directory: str, speeds: tuple[float, ...], index: int, size: int,
                barrier: Any, window_s: float, results: Any, name: str, cpu: int | None = None) -> None:
    """Count real torch compute slices done on device `index` during a shared time window
    (on CPU `cpu` alone if given)."""
    import torch

    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    torch.set_num_threads(1)
    a = torch.randn(size, size)
    with EmulatedDevice.open(index, config(directory, speeds)) as dev:
        for _ in range(3):  # warm up allocator and kernels outside the window
            with dev.compute():
                a @ a
        barrier.wait(timeout=120)
        steps = 0
        deadline = time.monotonic() + window_s
        while time.monotonic() < deadline:
            with dev.compute():
                (a @ a).sum().item()
            steps += 1
    results.put((name, steps / window_s))


def hold_forever(directory: str, speeds: tuple[float, ...], index: int, ready: Any) -> None:
    """Take the device and keep it until killed."""
    dev = EmulatedDevice.open(index, config(directory, speeds))
    dev.acquire()
    ready.set()
    while True:
        time.sleep(1)


def wait_for_device(directory: str, speeds: tuple[float, ...], index: int) -> None:
    """Queue for the device (blocks behind the holder until killed)."""
    EmulatedDevice.open(index, config(directory, speeds)).acquire()
    os._exit(0)


def train_in_rounds(directory: str, speeds: tuple[float, ...], index: int, size: int, barrier: Any,
                    plan: list[bool], window_s: float, results: Any, name: str) -> None:
    """Each round starts on the barrier; compute on the device for the window where `plan` says."""
    import torch

    torch.set_num_threads(1)
    a = torch.randn(size, size)
    steps = []
    with EmulatedDevice.open(index, config(directory, speeds)) as dev:
        with dev.compute():
            a @ a
        for active in plan:
            barrier.wait(timeout=120)
            n, deadline = 0, time.monotonic() + window_s
            while active and time.monotonic() < deadline:
                with dev.compute():
                    (a @ a).sum().item()
                n += 1
            steps.append(n)
    results.put((name, steps))


def train_paced(directory: str, speeds: tuple[float, ...], index: int, size: int, barrier: Any,
                share: float | None, window_s: float, results: Any, name: str) -> None:
    """Train through an ElasticLoop paced at `share` (None: unpaced) on device
    `index`, each step one compute slice; report steps/s over the window."""
    import torch
    from torch.utils.data import TensorDataset

    from gpufair.client.splits import LocalExchanger
    from gpufair.client.training import ElasticLoop

    torch.set_num_threads(1)
    a = torch.randn(size, size)
    loop = ElasticLoop(TensorDataset(torch.zeros(100_000)), 1, rank=0, world_size=1,
                       exchanger=LocalExchanger(), initial_split=(1,), initial_version=1,
                       initial_shares=() if share is None else (share,))
    with EmulatedDevice.open(index, config(directory, speeds)) as dev:
        with dev.compute():
            a @ a
        barrier.wait(timeout=120)
        steps, deadline = 0, time.monotonic() + window_s
        for _ in loop.epoch(0):
            if time.monotonic() >= deadline:
                break
            with dev.compute():
                (a @ a).sum().item()
            steps += 1
    results.put((name, steps / window_s))
