"""Emulated shared GPUs: real processes really wait for each other, fairly."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

import emu_workers
from gpufair.client.workloads.emulated import (
    EmuConfig,
    EmulatedDevice,
    device_usage,
    host_segment,
    parse_gpus,
)
from gpufair.common.errors import FailedPrecondition, InvalidArgument, Unavailable

CTX = mp.get_context("spawn")
WINDOW_S = 2.0
ROUND_S = 0.6
MATMUL = 384  # a few ms of single-thread compute per slice: lock overhead stays small


@pytest.fixture
def emu_dir() -> Iterator[Path]:
    """Device files in shared memory when there is some, as the default GPUFAIR_EMU_DIR is."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="gpufair-emu-test-", dir=base) as d:
        yield Path(d)


def _wait_until(cond, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def _rates(tmp: Path, speeds: tuple[float, ...], placement: dict[str, int]) -> dict[str, float]:
    """Run one process per name on its device, all timing the same window; steps/s each.
    All run on one CPU, so each computing process gets the same share of it whatever
    else loads the machine (spread over cores, one could get a core to itself)."""
    barrier, results = CTX.Barrier(len(placement)), CTX.Queue()
    cpu = min(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None  # Linux only
    return _run_all([CTX.Process(target=emu_workers.train_steps,
                                 args=(str(tmp), speeds, idx, MATMUL, barrier, WINDOW_S, results, name, cpu))
                     for name, idx in placement.items()], results)


def _run_all(procs: list, results) -> dict:
    """Start the worker processes, collect one (name, value) result from each, check exits."""
    for p in procs:
        p.start()
    out = dict(results.get(timeout=180) for _ in procs)
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    return out


def cfg(tmp: Path, speeds: tuple[float, ...] = (1.0, 1.0)) -> EmuConfig:
    return emu_workers.config(str(tmp), speeds)


def test_two_processes_sharing_a_device_each_get_about_half_their_exclusive_speed(emu_dir: Path) -> None:
    # Rounds alternate: "a" alone on the device, then "a" and "b" together. Alternating short
    # rounds makes load from anything else on the machine hit both kinds alike, and only one
    # process computes at any moment in either kind, so CPU contention is alike too.
    rounds = 6
    alone_round = [i % 2 == 0 for i in range(rounds)]
    plans = {"a": [True] * rounds, "b": [not x for x in alone_round]}
    barrier, results = CTX.Barrier(2), CTX.Queue()
    steps = _run_all([CTX.Process(target=emu_workers.train_in_rounds,
                                  args=(str(emu_dir), (1.0,), 0, MATMUL, barrier, plan, ROUND_S,
                                        results, name))
                      for name, plan in plans.items()], results)

    def total(name: str, alone: bool) -> int:
        return sum(n for n, x in zip(steps[name], alone_round) if x == alone)

    exclusive = total("a", alone=True)
    assert 0.3 < total("a", alone=False) / exclusive < 0.75, steps
    assert 0.3 < total("b", alone=False) / exclusive < 0.75, steps
    assert 0.75 < total("a", alone=False) / total("b", alone=False) < 1.33, steps  # fair split


def test_a_lone_process_outruns_each_process_sharing_another_device(emu_dir: Path) -> None:
    # Same window for all: the lone process on device 0 is the reference; the pair on
    # device 1 shares one device's worth of time between them, fairly.
    rates = _rates(emu_dir, (1.0, 1.0), {"alone": 0, "a": 1, "b": 1})
    assert rates["a"] / rates["alone"] < 0.85 and rates["b"] / rates["alone"] < 0.85, rates
    assert 0.75 < rates["a"] / rates["b"] < 1.33, rates


def _interleaved_rates(steps: dict[str, Callable[[], None]], rounds: int = 200) -> dict[str, float]:
    """Steps/s of each step function, run alternately so machine load hits them alike."""
    spent = dict.fromkeys(steps, 0.0)
    for _ in range(rounds):
        for name, step in steps.items():
            t0 = time.perf_counter()
            step()
            spent[name] += time.perf_counter() - t0
    return {name: rounds / s for name, s in spent.items()}


def _matmul(size: int = 512) -> Callable[[], None]:
    # ~10 ms slices, so wake-up latency on a loaded 2-core machine stays a small share.
    torch.set_num_threads(1)
    a = torch.randn(size, size)
    return lambda: (a @ a).sum().item()


def test_a_process_alone_on_a_device_gets_its_full_speed(emu_dir: Path) -> None:
    work = _matmul()
    with EmulatedDevice.open(0, cfg(emu_dir)) as dev:
        def on_device() -> None:
            with dev.compute():
                work()

        rates = _interleaved_rates({"bare": work, "device": on_device}, rounds=100)
    assert rates["device"] / rates["bare"] > 0.7, rates


def test_a_half_speed_device_is_half_as_fast(emu_dir: Path) -> None:
    work = _matmul()
    c = cfg(emu_dir, (1.0, 0.5))
    with EmulatedDevice.open(0, c) as fast, EmulatedDevice.open(1, c) as slow:
        def on(dev: EmulatedDevice) -> Callable[[], None]:
            def step() -> None:
                with dev.compute():
                    work()
            return step

        rates = _interleaved_rates({"fast": on(fast), "slow": on(slow)}, rounds=60)
    assert 0.3 < rates["slow"] / rates["fast"] < 0.7, rates  # wide: sleeps overshoot under load


def test_waiters_are_served_in_arrival_order(emu_dir: Path) -> None:
    c = cfg(emu_dir)
    holder, first, second = (EmulatedDevice.open(0, c) for _ in range(3))
    order: list[str] = []

    def take(dev: EmulatedDevice, name: str) -> None:
        with dev.compute(timeout=30):
            order.append(name)

    holder.acquire()
    t1 = threading.Thread(target=take, args=(first, "first"))
    t1.start()
    _wait_until(lambda: device_usage(c, 0).queued == 2)
    t2 = threading.Thread(target=take, args=(second, "second"))
    t2.start()
    _wait_until(lambda: device_usage(c, 0).queued == 3)
    assert order == []  # nobody overtakes the holder
    holder.release()
    t1.join(30), t2.join(30)
    assert order == ["first", "second"]


def test_a_killed_holder_or_waiter_does_not_block_the_device(emu_dir: Path) -> None:
    c = cfg(emu_dir)
    ready = CTX.Event()
    holder = CTX.Process(target=emu_workers.hold_forever, args=(str(emu_dir), c.speeds, 0, ready))
    holder.start()
    assert ready.wait(120)
    with EmulatedDevice.open(0, c) as dev:
        with pytest.raises(Unavailable):
            dev.acquire(timeout=0.2)
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(30)
        dev.acquire(timeout=30)  # the dead holder's slice is gone
        waiter = CTX.Process(target=emu_workers.wait_for_device, args=(str(emu_dir), c.speeds, 0))
        waiter.start()
        _wait_until(lambda: device_usage(c, 0).queued == 2, timeout=120)
        os.kill(waiter.pid, signal.SIGKILL)
        waiter.join(30)
        dev.release()
        dev.acquire(timeout=30)  # queued behind the dead waiter's ticket, still served
        dev.release()


def test_usage_accounts_busy_time_slices_and_occupants(emu_dir: Path) -> None:
    c = cfg(emu_dir, (1.0, 0.5))
    assert device_usage(c, 1).busy_s == 0.0  # never used reads as idle
    with EmulatedDevice.open(1, c) as dev:
        assert dev.device_id == "emu-test-1" and dev.speed == 0.5
        start = time.perf_counter()
        with dev.compute():
            time.sleep(0.05)
        held = time.perf_counter() - start
        usage = dev.usage()
        assert held >= 0.1  # a half-speed device keeps the slice twice as long
        assert 0.1 <= usage.busy_s <= held and usage.slices == 1
        assert usage.occupants == (os.getpid(),) and usage.queued == 0
        with dev.compute(), pytest.raises(FailedPrecondition):
            dev.acquire()
    assert device_usage(c, 1).occupants == ()


def test_device_spec_from_env(tmp_path: Path) -> None:
    assert parse_gpus("3") == (1.0, 1.0, 1.0)
    assert parse_gpus("2,2,1") == (1.0, 1.0, 0.5)
    env = {"GPUFAIR_EMU_GPUS": "1.0,0.25", "GPUFAIR_EMU_DIR": str(tmp_path)}
    c = EmuConfig.from_env(env)
    assert c.speeds == (1.0, 0.25) and c.dir == tmp_path
    assert c.device_id(1) == f"emu-{host_segment()}-1"
    for bad in ("", "0", "a,b", "1,-1", "1,inf"):
        with pytest.raises(InvalidArgument):
            parse_gpus(bad)
    with pytest.raises(InvalidArgument, match="does not exist"):
        EmulatedDevice.open(2, c)


def test_host_segment_is_a_safe_id() -> None:
    assert host_segment("node 1/a") == "node-1-a"
    assert host_segment("///") == "localhost"


def test_a_lost_state_file_never_lets_two_holders_in(emu_dir: Path) -> None:
    c = cfg(emu_dir)
    holder, other = EmulatedDevice.open(0, c), EmulatedDevice.open(0, c)
    holder.acquire()
    (emu_dir / "dev-0" / "meta").write_bytes(b"")  # ticket counter gone
    with pytest.raises(Unavailable):
        other.acquire(timeout=0.1)
    holder.release()
    other.acquire(timeout=5)
    other.close(), holder.close()
    with pytest.raises(FailedPrecondition, match="closed"):
        other.acquire()


def _paced_rates(tmp: Path, share: float | None) -> dict[str, float]:
    results, barrier = CTX.Queue(), CTX.Barrier(2)
    return _run_all([CTX.Process(target=emu_workers.train_paced,
                                 args=(str(tmp), (1.0,), 0, MATMUL, barrier, s, 3.0, results, name))
                     for name, s in (("paced", share), ("neighbour", None))], results)


def test_a_paced_job_leaves_its_gpu_time_to_the_neighbour(emu_dir: Path) -> None:
    shared = _paced_rates(emu_dir, None)
    paced = _paced_rates(emu_dir, 0.25)
    # Time-sliced, the two split the device about evenly; paced to a quarter, the
    # job keeps about a quarter and its neighbour gets the rest.
    assert paced["neighbour"] > 1.3 * shared["neighbour"]
    assert paced["paced"] < 0.75 * shared["paced"]
    assert paced["neighbour"] > 2 * paced["paced"]


def test_a_long_wait_for_a_device_warns_what_usually_causes_it(emu_dir: Path, caplog, monkeypatch) -> None:
    import gpufair.client.workloads.emulated as emulated

    monkeypatch.setattr(emulated, "STUCK_WAIT_S", 0.05)
    holder, waiter = EmulatedDevice.open(0, cfg(emu_dir)), EmulatedDevice.open(0, cfg(emu_dir))
    got = threading.Event()
    with caplog.at_level("WARNING", logger=emulated.__name__):
        holder.acquire()
        t = threading.Thread(target=lambda: (waiter.acquire(), got.set(), waiter.release()))
        t.start()
        _wait_until(lambda: "collective" in caplog.text)  # while the holder still holds it
        assert not got.is_set() and "emulated GPU emu-" in caplog.text
        holder.release()
        t.join(timeout=10)
    assert got.is_set()
    holder.close(), waiter.close()
    _wait_until(lambda: waiter._watchdog is not None and not waiter._watchdog.is_alive())  # it ends with the device
