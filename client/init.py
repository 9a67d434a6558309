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
from gpufair.common.errors import InvalidArgument

logger = logging.getLogger(__name__)


def _all_placements(mine: Placement, world: int) -> list[Placement]:
    if world > 1 and dist.is_available() and dist.is_initialized():
        out: list[Any] = [None] * world
        dist.all_gather_object(out, mine)
        return sorted(out, key=lambda p: p.rank)
    return [mine]


def _register(session: Session, placements: list[Placement], max_batch: int, exclusive_rate: float) -> None:
    spec = spb.JobSpec(job_id=session.job_id, model=session.model, global_batch=session.global_batch, total_samples=session.total_samples, exclusive_samples_per_s=exclusive_rate,
                       ranks=[spb.RankPlacement(rank=p.rank, node=p.node, device_id=p.device_id, device_type=p.device_type, max_batch=max_batch)
                              for p in placements])
    stub = spb_grpc.SchedulerServiceStub(session._channel(session.config.scheduler_addr))
    try:
        res = stub.RegisterJob(spb.RegisterJobRequest(spec=spec), metadata=session.metadata, timeout=5)
        session.registered = True
        logger.info("registered job %s (split %s)", session.job_id, list(res.job.split.batch_sizes))
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            raise InvalidArgument(f"the scheduler refused job {session.job_id!r}: {exc.details()}") from None
        # Not allowed (a job token: registered by its submitter) or unreachable: train on.
        logger.warning("could not register job %s (%s); training with the current split", session.job_id, code)


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
    if total_samples is None:
        if epochs is None or dataset_size is None:
            raise InvalidArgument("give total_samples, or epochs and dataset_size")
        total_samples = int(math.ceil(epochs * dataset_size))
    if global_batch < 1 or total_samples < 1:
        raise InvalidArgument("global_batch and total work must be positive")
    cfg = config or ClientConfig.from_env()
    rank, world = _rank_world()
    device_id, device_type = _local_device(cfg.node, rank, emulated_device)
    placement = Placement(rank, cfg.node, device_id, device_type)
    session = Session(job_id, global_batch, total_samples, model, rank, world, cfg, placement, emulated_device)
    placements = _all_placements(placement, world)
    if not cfg.enabled:
        return session
    if register and rank == 0:
        _register(session, placements, max_batch, exclusive_rate)
    if world > 1 and dist.is_available() and dist.is_initialized():
        dist.barrier()  # the job exists before any rank opens its command stream
    busy = session.busy_seconds if emulated_device is not None else None
    session._reporter = TelemetryReporter(session._channel(cfg.metrics_addr), job_id=job_id, rank=rank, node=cfg.node,
                                          device_id=device_id, global_batch=global_batch, total_samples=total_samples,
                                          metadata=session.metadata, busy_clock=busy, device_probe=probe_for(device_id, emulated_device))
    session._commands = GrpcCommandSource(session._channel(cfg.scheduler_addr), job_id=job_id, rank=rank, metadata=session.metadata)
    return session
