"""Building a `Session`: placements of every rank, registration, background threads."""

from __future__ import annotations

import logging
import math
from typing import Any

import grpc
import torch.distributed as dist

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as spb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as spb_grpc
from gpufair.client.commands import GrpcCommandSource
from gpufair.client.config import ClientConfig
from gpufair.client.devices import probe_for
from gpufair.client.session import Placement, Session, _local_device, _rank_world
from gpufair.client.telemetry import TelemetryReporter
from gpufair.common import env
from gpufair.common.errors import InvalidArgument
from gpufair.common.keys import check_segment

logger = logging.getLogger(__name__)


def _all_placements(mine: Placement, world: int) -> list[Placement]:
    if world > 1 and dist.is_available() and dist.is_initialized():
        out: list[Any] = [None] * world
        dist.all_gather_object(out, mine)
        return sorted(out, key=lambda p: p.rank)
    return [mine]


def _check_args(job_id: str, model: str, global_batch: int, total_samples: int, world: int, max_batch: int) -> None:
    try:
        check_segment("job_id", job_id)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    if not model or len(model) > 200:
        raise InvalidArgument("model must be 1-200 characters")
    if global_batch < world or total_samples < 1:
        raise InvalidArgument(f"global_batch ({global_batch}) must be >= the {world} ranks and total work positive")
    if max_batch < 0 or (max_batch and max_batch * world < global_batch):
        raise InvalidArgument(f"max_batch={max_batch} cannot hold global_batch {global_batch} on {world} ranks")


def _register(session: Session, placements: list[Placement], max_batch: int, exclusive_rate: float) -> str | None:
    """Register the job; returns why the scheduler refused it (None if registered or unreachable)."""
    spec = spb.JobSpec(job_id=session.job_id, model=session.model, global_batch=session.global_batch, total_samples=session.total_samples, exclusive_samples_per_s=exclusive_rate,
                       ranks=[spb.RankPlacement(rank=p.rank, node=p.node, device_id=p.device_id, device_type=p.device_type, max_batch=max_batch)
                              for p in placements])
    stub = spb_grpc.SchedulerServiceStub(session._channel(session.config.scheduler_addr))
    try:
        res = stub.RegisterJob(spb.RegisterJobRequest(spec=spec), metadata=session.metadata, timeout=5)
        session.registered = True
        session.initial_split = tuple(res.job.split.batch_sizes)
        session.initial_version = res.job.split.version
        session.initial_shares = tuple(res.job.split.shares)
        logger.info("registered job %s (split %s)", session.job_id, list(res.job.split.batch_sizes))
        return None
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.ALREADY_EXISTS):
            return f"the scheduler refused job {session.job_id!r}: {exc.details()}"
        # Not allowed (a job token: registered by its submitter) or unreachable: train on.
        logger.warning("could not register job %s (%s); training with the current split", session.job_id, code)
    return None


def init(job_id: str, global_batch: int, *, model: str, total_samples: int | None = None, epochs: float | None = None,
         dataset_size: int | None = None, emulated_device: Any = None, register: bool = True, max_batch: int = 0,
         exclusive_rate: float = 0.0,
         config: ClientConfig | None = None) -> Session:
    """Join this training process to gpufair (every rank calls it, after init_process_group).

    Total work is `total_samples`, or `epochs * dataset_size`. `exclusive_rate`
    (samples/s with the GPUs to itself) overrides the profile store's estimate. Raises
    InvalidArgument only for arguments that are wrong; never for the control
    plane being down.
    """
    placed_as = env.JOB.read()
    if placed_as and placed_as != job_id:
        logger.info("job %r runs as %r, the id `gpufair submit` placed", job_id, placed_as)
        job_id = placed_as
    if total_samples is None:
        if epochs is None or dataset_size is None:
            raise InvalidArgument("give total_samples, or epochs and dataset_size")
        total_samples = int(math.ceil(epochs * dataset_size))
    rank, world = _rank_world()
    # Checked on every rank before any collective: a bad argument fails them all alike.
    _check_args(job_id, model, global_batch, total_samples, world, max_batch)
    cfg = config or ClientConfig.from_env()
    device_id, device_type = _local_device(cfg.node, rank, emulated_device)
    placement = Placement(rank, cfg.node, device_id, device_type)
    session = Session(job_id, global_batch, total_samples, model, rank, world, cfg, placement, emulated_device)
    placements = _all_placements(placement, world)
    if not cfg.enabled:
        return session
    refused = _register(session, placements, max_batch, exclusive_rate) if register and rank == 0 else None
    if world > 1 and dist.is_available() and dist.is_initialized():
        # Rank 0's outcome reaches every rank (this is also the barrier: the job
        # exists before any rank opens its command stream).
        box = [(refused, session.registered, session.initial_split, session.initial_version, session.initial_shares)]
        dist.broadcast_object_list(box, src=0)
        refused, session.registered, session.initial_split, session.initial_version, session.initial_shares = box[0]
    if refused:
        raise InvalidArgument(refused)
    busy = session.busy_seconds if emulated_device is not None else None
    session._reporter = TelemetryReporter(session._channel(cfg.metrics_addr), job_id=job_id, rank=rank, node=cfg.node,
                                          device_id=device_id, global_batch=global_batch, total_samples=total_samples,
                                          metadata=session.metadata, busy_clock=busy, device_probe=probe_for(device_id, emulated_device))
    session._commands = GrpcCommandSource(session._channel(cfg.scheduler_addr), job_id=job_id, rank=rank, metadata=session.metadata)
    return session
