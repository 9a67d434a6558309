"""A tiny NVML reader: per-GPU UUID, name, utilisation and memory.

Uses nvidia-ml-py (`import pynvml`). Where NVML is missing (no driver, no
package: the normal case on CPU machines) it reads nothing and says so once at
INFO. It never raises into callers: this runs inside training loops.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from types import ModuleType

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one moment."""

    index: int
    uuid: str
    name: str
    util_pct: float  # SM busy share over NVML's last sample period
    mem_used_bytes: int
    mem_total_bytes: int


def _text(value: str | bytes) -> str:
    # Older pynvml returns bytes, newer returns str.
    return value.decode() if isinstance(value, bytes) else value


class NvmlReader:
    """Reads every visible GPU through NVML; initialises lazily, once."""

    def __init__(self, module: ModuleType | None = None) -> None:
        self._nvml = module
        self._state = "new"  # new -> ready | absent | closed

    def _ensure(self) -> bool:
        if self._state == "new":
            try:
                if self._nvml is None:
                    self._nvml = importlib.import_module("pynvml")
                self._nvml.nvmlInit()
                self._state = "ready"
            except Exception as e:  # noqa: BLE001 - any NVML failure means "no GPUs here"
                self._state = "absent"
                logger.info("NVML not available (%s): no GPU readings will be reported", e)
        return self._state == "ready"

    @property
    def available(self) -> bool:
        """Whether NVML could be initialised."""
        return self._ensure()

    def read(self) -> tuple[GpuReading, ...]:
        """Readings for every GPU, or () when NVML is absent or fails."""
        if not self._ensure():
            return ()
        nv = self._nvml
        assert nv is not None
        out = []
        try:
            for i in range(nv.nvmlDeviceGetCount()):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                out.append(GpuReading(
                    index=i,
                    uuid=_text(nv.nvmlDeviceGetUUID(h)),
                    name=_text(nv.nvmlDeviceGetName(h)),
                    util_pct=float(nv.nvmlDeviceGetUtilizationRates(h).gpu),
                    mem_used_bytes=int(mem.used),
                    mem_total_bytes=int(mem.total),
                ))
        except Exception as e:  # noqa: BLE001 - a GPU fell off the bus, driver reset, ...
            logger.warning("NVML read failed: %s", e)
            return ()
        return tuple(out)

    def close(self) -> None:
        """Shut NVML down (safe to call more than once)."""
        if self._state == "ready" and self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass
        self._state = "closed"


def read_gpus() -> tuple[GpuReading, ...]:
    """One-shot convenience: read every GPU now, () without NVML."""
    reader = NvmlReader()
    try:
        return reader.read()
    finally:
        reader.close()
