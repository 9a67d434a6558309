"""The NVML reader: readings through pynvml, nothing (and one INFO line) without it."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from gpufair.client.nvml import GpuReading, NvmlReader


class FakeNvml:
    """The slice of pynvml the reader uses, for two GPUs."""

    def __init__(self, fail_reads: bool = False) -> None:
        self.fail_reads = fail_reads
        self.shutdowns = 0

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if self.fail_reads:
            raise RuntimeError("GPU is lost")
        return i

    def nvmlDeviceGetUUID(self, h: int) -> bytes:
        return f"GPU-000{h}".encode()  # old pynvml returns bytes

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H200"

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=40 + h, memory=5)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(used=1 << 30, total=80 << 30)


class NoDriver:
    def nvmlInit(self) -> None:
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")


def test_reads_every_gpu_through_nvml() -> None:
    fake = FakeNvml()
    reader = NvmlReader(module=fake)  # type: ignore[arg-type]
    assert reader.read() == (
        GpuReading(0, "GPU-0000", "NVIDIA H200", 40.0, 1 << 30, 80 << 30),
        GpuReading(1, "GPU-0001", "NVIDIA H200", 41.0, 1 << 30, 80 << 30),
    )
    reader.close()
    reader.close()
    assert fake.shutdowns == 1 and reader.read() == ()


def test_missing_nvml_reads_nothing_and_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    reader = NvmlReader(module=NoDriver())  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="gpufair.client.nvml"):
        assert reader.read() == () and reader.read() == ()
        assert not reader.available
    assert len([r for r in caplog.records if "NVML not available" in r.message]) == 1


def test_a_failing_read_never_raises() -> None:
    assert NvmlReader(module=FakeNvml(fail_reads=True)).read() == ()  # type: ignore[arg-type]


def test_the_real_reader_never_raises_here() -> None:
    # No driver on CPU machines (reads nothing); on a GPU machine every reading is sane.
    for r in NvmlReader().read():
        assert r.uuid and 0 <= r.util_pct <= 100 and 0 <= r.mem_used_bytes <= r.mem_total_bytes
