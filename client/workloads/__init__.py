"""Workloads: the model zoo, emulated shared GPUs and the exclusive-speed profiler.

Names are re-exported lazily (PEP 562) so `import gpufair.client.workloads.emulated`
does not pull in torch, and importing this package does no work.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "build_model": "zoo", "list_models": "zoo", "synthetic_batch": "zoo",
    "EmulatedDevice": "emulated", "EmuConfig": "emulated", "DeviceUsage": "emulated",
    "device_usage": "emulated",
    "StepTimeModel": "fit", "fit_step_time": "fit",
    "Measurement": "record", "Profile": "record",
    "ProfileConfig": "profiler", "run_profile": "profiler",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
