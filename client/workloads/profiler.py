"""The exclusive-speed profiler: timed SGD steps on synthetic data.

For each device count n it spawns n processes (one per device) that train the
model data-parallel (DDP over NCCL on CUDA, gloo on CPU; the code is the same)
over every requested per-device batch: warm-up steps, then timed steps. Rank 0
reports samples/s, step-time median and spread, peak memory and NVML
utilisation. The parent assembles a `Profile` with scaling efficiency and the
fitted t(b) = a + c*b.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
import resource
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from gpufair.client.nvml import NvmlReader
from gpufair.client.workloads.record import Measurement, Profile
from gpufair.client.workloads.zoo import build_model, synthetic_batch
from gpufair.common.errors import FailedPrecondition, InvalidArgument

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProfileConfig:
    """What to profile and how long; batches are per device."""

    model: str
    batches: tuple[int, ...]
    devices: tuple[int, ...] = (1,)
    image_size: int = 32
    width: int = 8
    num_classes: int = 10
    steps: int = 10
    warmup: int = 3
    threads_per_device: int = 1  # CPU: each emulated "device" is a process with this many threads
    impl: str = "auto"

    def validate(self) -> ProfileConfig:
        """Return self, or raise InvalidArgument naming the bad field."""
        if not self.batches or min(self.batches) < 1:
            raise InvalidArgument(f"batches must be positive integers, got {list(self.batches)}")
        if not self.devices or min(self.devices) < 1:
            raise InvalidArgument(f"devices must be positive integers, got {list(self.devices)}")
        for name in ("steps", "threads_per_device"):
            if getattr(self, name) < 1:
                raise InvalidArgument(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0:
            raise InvalidArgument(f"warmup must be >= 0, got {self.warmup}")
        build_model(self.model, num_classes=self.num_classes, image_size=self.image_size,
                    width=self.width, impl=self.impl)  # raises on unknown names/sizes
        return self


def device_type_name(cuda: bool | None = None) -> str:
    """"cpu", or the CUDA device's name made safe as an etcd key segment."""
    cuda = torch.cuda.is_available() if cuda is None else cuda
    if not cuda:
        return "cpu"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", torch.cuda.get_device_name(0)).strip("-") or "cuda"


def run_profile(cfg: ProfileConfig) -> Profile:
    """Profile `cfg.model` at every (devices, batch) pair; see module docstring."""
    cfg.validate()
    if torch.cuda.is_available() and max(cfg.devices) > torch.cuda.device_count():
        raise FailedPrecondition(
            f"asked for {max(cfg.devices)} devices but {torch.cuda.device_count()} GPUs are visible"
        )
    points: list[Measurement] = []
    for n in sorted(set(cfg.devices)):
        points += _run_group(cfg, n)
    return Profile.build(points, image_size=cfg.image_size, created_unix=time.time(),
                         torch_version=torch.__version__)


def _run_group(cfg: ProfileConfig, world: int) -> list[Measurement]:
    with tempfile.TemporaryDirectory(prefix="gpufair-profile-") as tmp:
        result = Path(tmp) / "result.json"
        try:
            mp.spawn(_worker, args=(world, cfg, tmp), nprocs=world, join=True)
        except Exception as e:  # noqa: BLE001 - a child's failure, reported as one line
            # Rank 0 writes the result once every rank has measured: a rank that
            # dies after that, tearing gloo down, lost nothing (on a loaded
            # 2-core machine gloo's teardown rarely aborts despite the barrier).
            if not result.exists():
                last = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
                raise FailedPrecondition(
                    f"profiling {cfg.model} on {world} device(s) failed: {last}") from None
            logger.warning("profiling %s on %d device(s): a rank failed after measuring (%s); "
                           "keeping the measurements", cfg.model, world, e)
        rows = json.loads(result.read_text())
    return [Measurement(**r) for r in rows]


def _worker(rank: int, world: int, cfg: ProfileConfig, out_dir: str) -> None:
    torch.set_num_threads(cfg.threads_per_device)
    cuda = torch.cuda.is_available()
    if world > 1:
        # A bounded timeout: if one rank fails, the others' collectives end too.
        dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{out_dir}/rendezvous",
                                rank=rank, world_size=world, timeout=datetime.timedelta(seconds=300))
    device = torch.device(f"cuda:{rank}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    model: nn.Module = build_model(cfg.model, num_classes=cfg.num_classes, image_size=cfg.image_size,
                                   width=cfg.width, impl=cfg.impl).to(device)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[rank] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    reader = NvmlReader() if cuda and rank == 0 else None
    rows = []
    try:
        for batch in sorted(set(cfg.batches)):
            rows.append(_measure(model, opt, cfg, batch, world, device, _util_probe(reader, rank)))
        if world > 1:
            # Leave together: a rank tearing gloo down while its peer is still
            # talking aborts ("terminate called without an active exception").
            dist.barrier()
        if rank == 0:  # every rank has measured; whole or not at all
            tmp = Path(out_dir) / "result.json.tmp"
            tmp.write_text(json.dumps([r.to_dict() for r in rows]))
            tmp.replace(Path(out_dir) / "result.json")
    finally:
        if reader is not None:
            reader.close()
        if world > 1:
            dist.destroy_process_group()


def _measure(model: nn.Module, opt: torch.optim.Optimizer, cfg: ProfileConfig, batch: int,
             world: int, device: torch.device, probe: Callable[[], float | None]) -> Measurement:
    x, y = synthetic_batch(batch, cfg.image_size, cfg.num_classes, device)
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(cfg.warmup):
        step()
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    times: list[float] = []
    utils: list[float] = []
    every = max(1, cfg.steps // 5)
    start = time.perf_counter()
    for i in range(cfg.steps):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
        if i % every == every - 1 and (u := probe()) is not None:
            utils.append(u)
    total = time.perf_counter() - start
    return Measurement(
        model=cfg.model, device_type=device_type_name(cuda), devices=world, batch=batch,
        samples_per_s=world * batch * cfg.steps / total,
        step_s=statistics.median(times), step_s_p10=_quantile(times, 0.1),
        step_s_p90=_quantile(times, 0.9), peak_mem_bytes=_peak_mem(device),
        gpu_util_pct=statistics.fmean(utils) if utils else None,
    )


def _quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def _peak_mem(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    # Linux reports ru_maxrss in KiB; it is the process high-water, batches run ascending.
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _util_probe(reader: NvmlReader | None, rank: int) -> Callable[[], float | None]:
    """A callable reading this rank's GPU utilisation, matched by UUID (index as fallback)."""
    if reader is None or not reader.available:
        return lambda: None
    want = _norm_uuid(str(getattr(torch.cuda.get_device_properties(rank), "uuid", "")))

    def probe() -> float | None:
        readings = reader.read()
        for r in readings:
            if want and _norm_uuid(r.uuid) == want:
                return r.util_pct
        return readings[rank].util_pct if rank < len(readings) else None

    return probe


def _norm_uuid(u: str) -> str:
    return u.lower().removeprefix("gpu-").replace("-", "")
