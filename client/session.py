"""`gpufair.client.init(...)`: one call that joins a training process to gpufair.

    session = gpufair.client.init(job_id="resnet-a", global_batch=256, total_samples=1_281_167 * 90, model="resnet50")
    loop = session.loop(dataset, num_workers=4)          # replaces DataLoader(..., sampler=DistributedSampler(...))
    for epoch in range(90):
        for x, y in loop.epoch(epoch):
            loop.scale_loss(loss_fn(ddp(x), y)).backward()   # replaces loss.backward()
            opt.step(); opt.zero_grad()
    session.close()

Every remote call is best effort: with the control plane down the session
trains with the split it has (at first the even one) and keeps retrying.
`session.close()` ends the job's life at the scheduler (rank 0 deregisters it
as finished; as failed when the `with` block exits on an exception), so the
job leaves `gpufair jobs` with its final slow-down, completion time and samples.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import torch.distributed as dist

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as spb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as spb_grpc
from gpufair.client.commands import GrpcCommandSource
from gpufair.client.config import ClientConfig
from gpufair.client.telemetry import TelemetryReporter
from gpufair.client.training import SYNC_EVERY_S, ElasticLoop, StepRecord
from gpufair.common.channels import sync_channel, token_metadata

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Placement:
    rank: int
    node: str
    device_id: str
    device_type: str


def _rank_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def _local_device(node: str, rank: int, emulated: Any) -> tuple[str, str]:
    """(device id, device type) of this rank: emulated, a CUDA GPU's UUID, or the CPU."""
    if emulated is not None:
        return emulated.device_id, "emulated"
    try:
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            return f"GPU-{props.uuid}", props.name.lower().replace(" ", "-")
    except Exception:  # noqa: BLE001 - no GPU info is fine
        pass
    return f"cpu-{node}-{rank}", "cpu"


class Progress:
    """A step observer keeping the job's cumulative samples and the latest step (for close() and status lines)."""

    def __init__(self) -> None:
        self.samples = 0
        self.last: StepRecord | None = None

    def on_step(self, record: StepRecord) -> None:
        self.samples, self.last = record.global_samples_total, record


@dataclass
class Session:
    """A training process's link to gpufair; build it with `init()`."""

    job_id: str
    global_batch: int
    total_samples: int
    model: str
    rank: int
    world_size: int
    config: ClientConfig
    placement: Placement
    emulated: Any = None  # an EmulatedDevice, if this rank uses one
    registered: bool = False
    initial_split: tuple[int, ...] = ()  # the split at registration (empty if the scheduler was not reached)
    initial_version: int = 0  # its version
    initial_shares: tuple[float, ...] = ()  # its paced shares (all 0: the job waits to be admitted)
    progress: Progress = field(default_factory=Progress)
    _closed: bool = False
    _busy_s: float = 0.0
    _channels: list[grpc.Channel] = field(default_factory=list)
    _reporter: TelemetryReporter | None = None
    _commands: GrpcCommandSource | None = None
    _loops: list[ElasticLoop] = field(default_factory=list)

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return token_metadata(self.config.token) if not (self.config.tls or self.config.tls_ca) else ()

    def _channel(self, address: str) -> grpc.Channel:
        ch = sync_channel(address, tls_ca=self.config.tls_ca, tls=self.config.tls, token=self.config.token,
                          client_cert=self.config.client_cert, client_key=self.config.client_key)
        self._channels.append(ch)
        return ch

    @contextlib.contextmanager
    def compute(self) -> Iterator[None]:
        """Hold this rank's emulated GPU while computing (a no-op on real GPUs and CPUs).

        Run no collective inside (DDP's backward all-reduce, a barrier): it waits for the
        job's other ranks, and two jobs sharing two emulated GPUs, each holding one, would
        wait for each other for ever (a real GPU runs others' kernels meanwhile); a rank
        that waits a minute for its device logs a warning that says so."""
        if self.emulated is None:
            yield
            return
        with self.emulated.compute():
            t0 = time.perf_counter()
            try:
                yield
            finally:
                self._busy_s += time.perf_counter() - t0

    def busy_seconds(self) -> float:
        return self._busy_s

    def loop(self, dataset: Any, *, seed: int = 0, sync_every: int = 10, sync_every_s: float | None = SYNC_EVERY_S,
             observers: Sequence[Any] = (), **loader_kwargs: Any) -> ElasticLoop:
        """This rank's elastic data loading, following the job's split commands (plus your own step observers);
        the ranks agree on commands about every `sync_every_s` seconds, at most `sync_every` steps apart."""
        observers = ([self._reporter] if self._reporter else []) + [self.progress] + list(observers)
        start = dict(initial_split=self.initial_split, initial_version=self.initial_version,
                     initial_shares=self.initial_shares) if len(self.initial_split) == self.world_size else {}
        busy = self.busy_seconds if self.emulated is not None else None
        loop = ElasticLoop(dataset, self.global_batch, rank=self.rank, world_size=self.world_size, seed=seed, sync_every=sync_every,
                           sync_every_s=sync_every_s, observers=observers, command_source=self._commands, busy_clock=busy, **start, **loader_kwargs)
        self._loops.append(loop)
        return loop

    def close(self, *, failed: bool = False, reason: str = "") -> None:
        """Stop telemetry and commands and end the job's life at the scheduler (rank 0:
        finished, or `failed`); training state is untouched. Never raises; idempotent."""
        if self._closed:
            return
        self._closed = True
        for loop in self._loops:
            loop.close()  # the first close stops the shared command source; later ones are no-ops
        if self._reporter:
            self._reporter.close()
        if self.rank == 0 and self.config.enabled:
            self._deregister(failed, reason)
        for ch in self._channels:
            ch.close()
        if self.emulated is not None:
            self.emulated.close()

    def _deregister(self, failed: bool, reason: str) -> None:
        outcome = spb.JOB_OUTCOME_FAILED if failed else spb.JOB_OUTCOME_FINISHED
        req = spb.DeregisterJobRequest(job_id=self.job_id, outcome=outcome, samples_done=self.progress.samples, reason=reason[:500])
        try:
            stub = spb_grpc.SchedulerServiceStub(self._channel(self.config.scheduler_addr))
            stub.DeregisterJob(req, metadata=self.metadata, timeout=3)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            # The scheduler ends a job whose ranks all left by itself (GPUFAIR_JOB_LOST_S), so this is no loss.
            logger.info("could not deregister job %s (%s); the scheduler will end it when its ranks are gone", self.job_id, code)
        except Exception:  # noqa: BLE001 - never into training
            logger.debug("deregistration failed", exc_info=True)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        failed = exc_type is not None
        self.close(failed=failed, reason=f"training stopped on {exc_type.__name__}: {str(exc)[:200]}" if failed and exc_type else "")
