"""Correct gradients when ranks hold local batches of different sizes.

DDP averages gradients over ranks with equal weights. With a loss that is the
mean over the local batch, rank r's gradient is g_r = (1/n_r) * sum of its
per-sample gradients, and DDP yields (1/W) * sum_r g_r, which over-weights the
samples of small local batches. The mean over the global batch of N samples
is sum_r (n_r / N) * g_r. Two ways to get it:

* `scale_loss` (recommended): multiply the local loss by n_r * W / N before
  `backward()`; DDP's mean then gives exactly sum_r (n_r / N) * g_r. It works
  with any DDP configuration (other comm hooks, gradient accumulation with
  `no_sync`, static graphs) and even without DDP.
* `WeightedAverageHook` (a DDP comm hook): leave the loss alone and weight each
  rank's bucket by n_r / N before a SUM all-reduce. Use it when the loss is
  computed by code you cannot wrap; it replaces DDP's default hook, so it
  cannot be combined with another comm hook (e.g. fp16 compression).

Use one, never both. Layers that compute batch statistics (BatchNorm) still
see per-rank batches; that is outside what gradient weighting can fix.
"""

from __future__ import annotations

import logging
from typing import Literal

import torch
import torch.distributed as dist

from gpufair.common.errors import InvalidArgument

logger = logging.getLogger(__name__)


def loss_scale(local_n: int, global_n: int, world_size: int, reduction: str = "mean") -> float:
    """The factor `scale_loss` multiplies the loss by."""
    if world_size < 1:
        raise InvalidArgument(f"world size must be >= 1, got {world_size}")
    if global_n < 1 or not 0 <= local_n <= global_n:
        raise InvalidArgument(f"local batch {local_n} does not fit a global batch of {global_n}")
    if reduction == "mean":
        return local_n * world_size / global_n
    if reduction == "sum":
        return world_size / global_n
    raise InvalidArgument(f"reduction must be 'mean' or 'sum', got {reduction!r}")


def scale_loss(
    loss: torch.Tensor,
    local_n: int,
    global_n: int,
    world_size: int,
    reduction: Literal["mean", "sum"] = "mean",
) -> torch.Tensor:
    """Rescale a local loss so DDP's equal-weight average is the global-batch mean.

    `reduction` says what `loss` is over the local batch: "mean" (the usual
    `reduction="mean"` of torch losses) scales by local_n * world_size /
    global_n; "sum" scales by world_size / global_n.
    """
    return loss * loss_scale(local_n, global_n, world_size, reduction)


class WeightedAverageHook:
    """DDP comm hook state and callable: all-reduce of n_r/N-weighted gradients.

    Install with `register(ddp_model)` (the instance carries its own state)
    and call `set_batch(local_n, global_n)`
    every step before `backward()`. The loss must be the mean over the local
    batch.
    """

    def __init__(self, process_group: dist.ProcessGroup | None = None) -> None:
        self._group = process_group
        self._weight = 1.0

    def set_batch(self, local_n: int, global_n: int) -> None:
        """Record this rank's share of the global batch for the next backward."""
        if global_n < 1 or not 0 <= local_n <= global_n:
            raise InvalidArgument(f"local batch {local_n} does not fit a global batch of {global_n}")
        self._weight = local_n / global_n

    @property
    def weight(self) -> float:
        return self._weight

    def register(self, ddp_model: torch.nn.parallel.DistributedDataParallel) -> None:
        """Install this hook on `ddp_model` (once, before the first backward)."""
        ddp_model.register_comm_hook(state=None, hook=self.hook)

    # No annotations on `bucket`/return: DDP compares them to real types and
    # this module's postponed (string) annotations would not match.
    def hook(self, state, bucket):  # type: ignore[no-untyped-def]
        """Weight this rank's gradient bucket by n_r/N, then SUM all-reduce it."""
        del state  # the instance is the state
        tensor = bucket.buffer()
        tensor.mul_(self._weight)
        work = dist.all_reduce(tensor, group=self._group, async_op=True)
        return work.get_future().then(lambda fut: fut.value()[0])
