"""The training-loop helper: elastic batches, agreed splits, weighted loss, step hooks.

    loop = ElasticLoop(dataset, global_batch_size=64, observers=[telemetry])
    for epoch in range(epochs):
        for x, y in loop.epoch(epoch):
            loss = loss_fn(ddp_model(x), y)          # mean over the local batch
            loop.scale_loss(loss).backward()
            optimizer.step(); optimizer.zero_grad()
    loop.close()

Each step the helper (1) takes part in the split agreement, (2) fetches this
rank's local batch, (3) hands it to the loop body; the time until the body
asks for the next batch is the step's compute time (forward, backward,
optimizer). The split agreement's exchange for the next step runs during
the body, or right after it on a rank whose steps are long (see splits.py).
Observers get one `StepRecord` per step. Nothing gpufair does here raises
into the loop: observer and agreement failures are logged and counted; a
failed agreement freezes the split in force.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

from gpufair.client.gradients import WeightedAverageHook, scale_loss
from gpufair.client.sampler import BatchPlan, ElasticBatchSampler, even_split
from gpufair.client.splits import Exchanger, LocalExchanger, SplitAgreement, SplitCommand, TorchExchanger

logger = logging.getLogger(__name__)

#: The ranks agree on commands about this often (at most `sync_every` steps apart):
#: a command waits ~0.1 s whatever the step time, for one small all-gather per
#: 0.1 s of training (0.25-1 ms: at most 1 %; bench/client/README.md).
SYNC_EVERY_S = 0.1


@dataclass(frozen=True)
class StepRecord:
    """What one rank measured over one training step."""

    rank: int
    epoch: int
    step_in_epoch: int
    global_step: int
    local_batch_size: int
    global_batch_size: int
    split_version: int
    compute_s: float  # loop body: forward + backward + optimizer
    data_wait_s: float  # waiting for the DataLoader
    sync_s: float  # split agreement
    steps_total: int  # cumulative over the job (global_step + 1), survives restarts
    global_samples_total: int  # cumulative samples of all ranks over the job
    local_samples_total: int  # cumulative samples of this rank since this process started


class StepObserver(Protocol):
    """Receives one record per step (telemetry). Must be quick; may not block."""

    def on_step(self, record: StepRecord) -> None: ...


class CommandSource(Protocol):
    """Delivers split commands from a background thread by calling `offer`."""

    def start(self, offer: Callable[[SplitCommand], bool]) -> None: ...

    def stop(self) -> None: ...


class ElasticLoop:
    """Wraps a dataset into this rank's elastic DataLoader and runs the per-step protocol.

    Rank and world size default to the initialised torch.distributed group (or
    0 and 1). Every rank must build it with the same arguments, at the same
    point (it may create a process group). Extra keyword arguments go to
    `DataLoader` (num_workers, pin_memory, collate_fn, ...).
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        global_batch_size: int,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        initial_split: tuple[int, ...] | None = None,
        initial_version: int = 0,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = True,
        sync_every: int = 10,
        sync_every_s: float | None = SYNC_EVERY_S,
        observers: Iterable[StepObserver] = (),
        command_source: CommandSource | None = None,
        exchanger: Exchanger | None = None,
        initial_shares: tuple[float, ...] = (),
        hold_poll_s: float = 0.25,
        busy_clock: Callable[[], float] | None = None,
        **loader_kwargs: Any,
    ) -> None:
        distributed = dist.is_available() and dist.is_initialized()
        self.rank = rank if rank is not None else (dist.get_rank() if distributed else 0)
        self.world_size = world_size if world_size is not None else (dist.get_world_size() if distributed else 1)
        if exchanger is None:
            exchanger = TorchExchanger.create() if self.world_size > 1 else LocalExchanger()
        self.agreement = SplitAgreement(
            initial_split or even_split(global_batch_size, self.world_size),
            global_batch_size,
            world_size=self.world_size,
            exchanger=exchanger,
            every=sync_every,
            every_s=sync_every_s,
            initial_version=initial_version,
            initial_shares=initial_shares,
            control_lost=getattr(command_source, "lost", None),
        )
        self.sampler = ElasticBatchSampler(
            len(dataset),  # type: ignore[arg-type]
            global_batch_size,
            rank=self.rank,
            world_size=self.world_size,
            split_provider=self.agreement.split_for_step,
            seed=seed,
            shuffle=shuffle,
            drop_last=drop_last,
        )
        self.loader = DataLoader(dataset, batch_sampler=self.sampler, **loader_kwargs)
        self._observers = list(observers)
        self._failed_observers: set[int] = set()
        self.observer_errors = 0
        self._hook: WeightedAverageHook | None = None
        self._warned_double = False
        self._plan: BatchPlan | None = None
        self._local_samples = 0
        self._source = command_source
        self._hold_poll_s = hold_poll_s
        self._busy_clock = busy_clock  # this rank's GPU-busy seconds so far, where known
        self.paced_s = 0.0  # seconds this rank was held back by pacing (telemetry, tests)
        self.held_s = 0.0  # seconds the job waited at a step boundary for the scheduler
        if command_source is not None:
            self._guard("command source start", lambda: command_source.start(self.agreement.offer))

    @property
    def plan(self) -> BatchPlan | None:
        """The current step's batch plan (local and global sizes, split), None before the first."""
        return self._plan

    @property
    def local_batch_size(self) -> int:
        return self._plan.local_size if self._plan else 0

    def offer(self, command: SplitCommand) -> bool:
        """Hand a split command to the agreement (thread-safe, never raises)."""
        return self.agreement.offer(command)

    def scale_loss(self, loss: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        """`loss` rescaled so DDP's average is the global-batch mean (see gradients.py)."""
        if self._plan is None or self._hook is not None:
            if self._hook is not None and not self._warned_double:
                self._warned_double = True
                logger.warning("comm hook installed: scale_loss leaves the loss unscaled")
            return loss
        plan = self._plan
        try:
            return scale_loss(loss, plan.local_size, plan.global_size, self.world_size, reduction)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - never into the training loop
            logger.exception("loss scaling failed; loss left unscaled")
            return loss

    def use_comm_hook(self, ddp_model: torch.nn.parallel.DistributedDataParallel) -> None:
        """Weight gradients in a DDP comm hook instead of scaling the loss."""
        hook = WeightedAverageHook(ddp_model.process_group)
        hook.register(ddp_model)
        self._hook = hook

    def epoch(self, epoch: int, start_step: int = 0) -> Iterator[Any]:
        """Yield this rank's batches of `epoch`, from `start_step` on (resume)."""
        sampler = self.sampler
        sampler.set_epoch(epoch, start_step)
        batches = iter(self.loader)
        record: dict[str, Any] | None = None
        handed_out = busy_out = 0.0
        trained_from: float | None = None  # the previous step's start, past its hold and pacing
        try:
            for k in range(start_step, sampler.steps_per_epoch):
                t0 = time.perf_counter()
                self.agreement.send_deferred()  # a rank with long steps sends its row now, not at the step's start
                if trained_from is not None:
                    self.agreement.note_step_s(t0 - trained_from)
                if record is not None:
                    self._emit(record, t0 - handed_out)
                    busy = self._busy_clock() - busy_out if self._busy_clock is not None else None
                    self._pace(record["global_step"], t0 - handed_out, busy)
                    record = None
                self.agreement.complete()  # launched during the previous step's body
                self._hold(sampler.global_step(epoch, k))
                t1 = trained_from = time.perf_counter()
                batch = next(batches)
                t2 = time.perf_counter()
                # Exchange for the next step overlaps with this step's body.
                self.agreement.launch(sampler.global_step(epoch, k) + 1)
                t3 = time.perf_counter()
                record = self._begin_step(epoch, k, data_wait_s=t2 - t1, sync_s=(t1 - t0) + (t3 - t2))
                handed_out = time.perf_counter()
                busy_out = self._busy_clock() if self._busy_clock is not None else 0.0
                yield batch
        finally:
            if record is not None:
                self._emit(record, time.perf_counter() - handed_out)

    def _pace(self, step: int, compute_s: float, busy_s: float | None = None) -> None:
        """Hold this rank for the rest of its share of step `step`: a step that kept its
        GPU busy for `busy_s` seconds (where known, else all `compute_s` of its body)
        takes busy_s / s in all at share s."""
        share = self.agreement.entry_for_step(step).share(self.rank)
        busy = compute_s if busy_s is None else min(busy_s, compute_s)
        if 0.0 < share < 1.0 and busy > 0:
            wait = busy / share - compute_s
            if wait > 0:
                time.sleep(wait)
                self.paced_s += wait

    def _hold(self, step: int) -> None:
        """Wait at `step` while the scheduler holds the job (every rank holds at
        the same step, so their exchanges pair up); never raises."""
        if not self.agreement.held_at(step):
            return
        started = time.perf_counter()
        # One line per job, not per rank (every rank holds at the same step).
        logger.log(logging.WARNING if self.rank == 0 else logging.DEBUG, "held by the scheduler before step %d: %s", step,
                    self.agreement.reason or "waiting for GPU time")
        try:
            while self.agreement.held_at(step) and not self.agreement.failed:
                # Every rank exchanges once a wake-up (the all-gather pairs them up); a
                # rank wakes when a command arrives, or after the poll interval to see
                # whether another rank has one or has lost the control plane.
                self.agreement.wait_for_command(self._hold_poll_s)
                self.agreement.exchange_now(step)
        except Exception:  # noqa: BLE001 - never into the training loop
            logger.exception("waiting for the scheduler failed; training on")
        waited = time.perf_counter() - started
        self.held_s += waited
        logger.log(logging.INFO if self.rank == 0 else logging.DEBUG, "resumed at step %d after %.1f s held", step, waited)

    def close(self) -> None:
        """Finish the exchange in flight and stop the command source (all ranks call it)."""
        self.agreement.complete()
        if self._source is not None:
            self._guard("command source stop", self._source.stop)

    def __enter__(self) -> ElasticLoop:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _begin_step(self, epoch: int, k: int, *, data_wait_s: float, sync_s: float) -> dict[str, Any]:
        plan = self.sampler.plan(epoch, k)
        self._plan = plan
        if self._hook is not None:
            self._hook.set_batch(plan.local_size, plan.global_size)
        self._local_samples += plan.local_size
        sampler = self.sampler
        return {
            "rank": self.rank,
            "epoch": epoch,
            "step_in_epoch": k,
            "global_step": plan.global_step,
            "local_batch_size": plan.local_size,
            "global_batch_size": plan.global_size,
            "split_version": self.agreement.entry_for_step(plan.global_step).version,
            "data_wait_s": data_wait_s,
            "sync_s": sync_s,
            "steps_total": plan.global_step + 1,
            "global_samples_total": epoch * sampler.samples_per_epoch
            + k * sampler.global_batch_size
            + plan.global_size,
            "local_samples_total": self._local_samples,
        }

    def _emit(self, fields: dict[str, Any], compute_s: float) -> None:
        record = StepRecord(compute_s=compute_s, **fields)
        for observer in self._observers:
            try:
                observer.on_step(record)
            except Exception:  # noqa: BLE001 - telemetry must never break training
                self.observer_errors += 1
                if id(observer) not in self._failed_observers:
                    self._failed_observers.add(id(observer))
                    logger.exception("step observer %r failed (logged once)", observer)

    def _guard(self, what: str, action: Callable[[], object]) -> None:
        try:
            action()
        except Exception:  # noqa: BLE001 - never into the training loop
            logger.exception("%s failed", what)
