"""gpufair's in-trainer library: telemetry, elastic batches, split commands, datasets.

The public API is re-exported lazily, so `import gpufair.client` does no work
(and the admin CLI under `gpufair.client.cli` does not pull in torch).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "init": "gpufair.client.init",
    "Session": "gpufair.client.session",
    "ClientConfig": "gpufair.client.config",
    "ElasticLoop": "gpufair.client.training",
    "StepRecord": "gpufair.client.training",
    "StepObserver": "gpufair.client.training",
    "CommandSource": "gpufair.client.training",
    "SplitAgreement": "gpufair.client.splits",
    "ElasticBatchSampler": "gpufair.client.sampler",
    "scale_loss": "gpufair.client.gradients",
    "WeightedAverageHook": "gpufair.client.gradients",
    "SplitCommand": "gpufair.client.splits",
    "resolve_dataset": "gpufair.client.datasets",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'gpufair.client' has no attribute {name!r}")
