"""Device readings attached to telemetry: NVML for real GPUs, accounting for emulated ones."""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

from gpufair.api.metrics.v1 import metrics_service_pb2 as pb

logger = logging.getLogger(__name__)


class EmulatedProbe:
    """Utilisation of an emulated device (all its users) over the last `window_s` or
    more: busy time is counted as each kernel ends, so a reading over a fraction of
    a step may see none (a job's last reading, say), as nvidia-smi averages too."""

    def __init__(self, device: Any, window_s: float = 1.0) -> None:
        self._device, self._window = device, window_s
        self._samples = deque([(time.monotonic(), device.usage().busy_s)])

    def __call__(self) -> pb.DeviceReading | None:
        try:
            now, busy = time.monotonic(), self._device.usage().busy_s
        except Exception:  # noqa: BLE001 - a reading is optional
            return None
        while len(self._samples) > 1 and now - self._samples[1][0] >= self._window:
            self._samples.popleft()  # the newest sample at least a window old stays the base
        t0, b0 = self._samples[0]
        self._samples.append((now, busy))
        util = 100.0 * (busy - b0) / (now - t0) if now > t0 else 0.0
        return pb.DeviceReading(source=pb.DEVICE_SOURCE_EMULATED, utilization_percent=min(max(util, 0.0), 100.0), device_name="emulated")


class NvmlProbe:
    """NVML utilisation and memory of the GPU with this UUID (nothing where NVML is absent)."""

    def __init__(self, uuid: str) -> None:
        from gpufair.client.nvml import NvmlReader

        self._reader = NvmlReader()
        self._uuid = uuid

    def __call__(self) -> pb.DeviceReading | None:
        for g in self._reader.read():
            if g.uuid == self._uuid or f"GPU-{g.uuid}" == self._uuid or g.uuid == f"GPU-{self._uuid}":
                return pb.DeviceReading(source=pb.DEVICE_SOURCE_NVML, utilization_percent=g.util_pct, memory_used_bytes=g.mem_used_bytes,
                                        memory_total_bytes=g.mem_total_bytes, device_name=g.name)
        return None


def probe_for(device_id: str, emulated: Any) -> Any:
    """The right probe for this rank's device, or None on a plain CPU."""
    if emulated is not None:
        return EmulatedProbe(emulated)
    if device_id.startswith("GPU-"):
        return NvmlProbe(device_id)
    return None
