"""Elastic batch sampler: fixed-size global batches, a per-rank split that may change.

Every epoch has one seeded global order (a permutation, as in
`DistributedSampler`). Global batch k covers positions [k*B, (k+1)*B) of that
order whatever the split; the split in force at step k only decides which
contiguous slice of the batch each rank gets (rank r takes the
`split[r]` positions after `sum(split[:r])`). So within an epoch every sample
is seen exactly once across ranks, also when the split changes mid-epoch, and
the global batches (hence the averaged gradient) do not depend on the split.

The split is asked of a provider at every step, keyed by the *global* step
(`epoch * steps_per_epoch + step_in_epoch`), so a change applies exactly at a
step boundary. Tail of an epoch (N not a multiple of B): with `drop_last=True`
(the default) it is skipped, so every global batch has exactly B samples; with
`drop_last=False` one smaller final batch of r = N mod B samples is split in
proportion to the split in force (largest remainder, each rank at least one
sample); if r < world_size the tail is dropped anyway, since a rank with no
sample cannot take part in a DDP step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch.utils.data import Sampler

from gpufair.common.errors import InvalidArgument

logger = logging.getLogger(__name__)

#: Maps a global step to the per-rank batch sizes in force at that step.
SplitProvider = Callable[[int], Sequence[int]]


@dataclass(frozen=True)
class BatchPlan:
    """Where one rank's local batch sits in one global batch."""

    epoch: int
    step_in_epoch: int
    global_step: int
    split: tuple[int, ...]  # per-rank sizes of this global batch
    offset: int  # start of this rank's slice within the global batch
    local_size: int
    global_size: int


def check_split(split: Sequence[int], world_size: int, total: int) -> tuple[int, ...]:
    """Return `split` as a tuple if it has one size >= 1 per rank summing to `total`."""
    values = tuple(split)
    if len(values) != world_size:
        raise InvalidArgument(f"split {values} has {len(values)} entries, world size is {world_size}")
    if any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in values):
        raise InvalidArgument(f"split {values} must hold integers >= 1")
    if sum(values) != total:
        raise InvalidArgument(f"split {values} sums to {sum(values)}, global batch size is {total}")
    return values


def even_split(global_batch_size: int, world_size: int) -> tuple[int, ...]:
    """Split `global_batch_size` as evenly as possible, the remainder to the first ranks."""
    if world_size < 1 or global_batch_size < world_size:
        raise InvalidArgument(
            f"global batch size {global_batch_size} cannot be split over {world_size} ranks"
        )
    base, extra = divmod(global_batch_size, world_size)
    return tuple(base + (1 if r < extra else 0) for r in range(world_size))


def proportional_split(split: Sequence[int], total: int) -> tuple[int, ...]:
    """Scale `split` to sum to `total` (largest remainder), each part >= 1; needs total >= len."""
    n = len(split)
    whole = sum(split)
    # Reserve one per rank, share the rest in proportion to the split.
    rest = total - n
    raw = [s * rest / whole for s in split]
    parts = [int(x) for x in raw]
    order = sorted(range(n), key=lambda i: (parts[i] - raw[i], i))
    for i in order[: rest - sum(parts)]:
        parts[i] += 1
    return tuple(p + 1 for p in parts)


class ElasticBatchSampler(Sampler[list[int]]):
    """A `batch_sampler` yielding this rank's local batch indices, step by step.

    Use as `DataLoader(dataset, batch_sampler=ElasticBatchSampler(...))`; it is
    iterated in the main process, so DataLoader workers are fine. Call
    `set_epoch(epoch, start_step)` before each epoch (also to resume mid-epoch).
    """

    def __init__(
        self,
        num_samples: int,
        global_batch_size: int,
        *,
        rank: int,
        world_size: int,
        split_provider: SplitProvider,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = True,
    ) -> None:
        if world_size < 1 or not 0 <= rank < world_size:
            raise InvalidArgument(f"rank {rank} is not in a world of size {world_size}")
        if global_batch_size < world_size:
            raise InvalidArgument(
                f"global batch size {global_batch_size} is smaller than world size {world_size}"
            )
        if num_samples < global_batch_size:
            raise InvalidArgument(
                f"dataset of {num_samples} samples is smaller than one global batch ({global_batch_size})"
            )
        self.num_samples = num_samples
        self.global_batch_size = global_batch_size
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self.shuffle = shuffle
        self.drop_last = drop_last
        self._provider = split_provider
        self._epoch = 0
        self._start_step = 0
        full, tail = divmod(num_samples, global_batch_size)
        self._has_tail = not drop_last and tail >= world_size
        self.steps_per_epoch = full + (1 if self._has_tail else 0)
        #: Samples one epoch covers (all ranks together).
        self.samples_per_epoch = full * global_batch_size + (tail if self._has_tail else 0)

    def set_epoch(self, epoch: int, start_step: int = 0) -> None:
        """Select the epoch (and the step within it) the next iteration starts at."""
        if epoch < 0 or not 0 <= start_step <= self.steps_per_epoch:
            raise InvalidArgument(
                f"cannot start at epoch {epoch} step {start_step} "
                f"(an epoch has {self.steps_per_epoch} steps)"
            )
        self._epoch = epoch
        self._start_step = start_step

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def start_step(self) -> int:
        return self._start_step

    def global_step(self, epoch: int, step_in_epoch: int) -> int:
        """The global step number of `step_in_epoch` in `epoch`."""
        return epoch * self.steps_per_epoch + step_in_epoch

    def order(self, epoch: int) -> torch.Tensor:
        """The epoch's global sample order, identical on every rank for one seed."""
        if not self.shuffle:
            return torch.arange(self.num_samples)
        generator = torch.Generator()
        generator.manual_seed(self.seed + epoch)
        return torch.randperm(self.num_samples, generator=generator)

    def plan(self, epoch: int, step_in_epoch: int) -> BatchPlan:
        """This rank's place in global batch `step_in_epoch` of `epoch`."""
        step = self.global_step(epoch, step_in_epoch)
        split = check_split(self._provider(step), self.world_size, self.global_batch_size)
        global_size = self.global_batch_size
        if step_in_epoch * self.global_batch_size + global_size > self.num_samples:
            global_size = self.num_samples - step_in_epoch * self.global_batch_size
            split = proportional_split(split, global_size)
        offset = sum(split[: self.rank])
        return BatchPlan(
            epoch=epoch,
            step_in_epoch=step_in_epoch,
            global_step=step,
            split=split,
            offset=offset,
            local_size=split[self.rank],
            global_size=global_size,
        )

    def __iter__(self) -> Iterator[list[int]]:
        epoch, start = self._epoch, self._start_step
        order = self.order(epoch)
        for k in range(start, self.steps_per_epoch):
            plan = self.plan(epoch, k)
            begin = k * self.global_batch_size + plan.offset
            yield order[begin : begin + plan.local_size].tolist()

    def __len__(self) -> int:
        return self.steps_per_epoch - self._start_step
