"""One rank of bench_epoch.py's training job: a small CNN over image shards, real DDP over gloo.

    python bench/cache/epoch_trainer.py --job J --mode direct|cache --uri s3://bucket/prefix/
        --global-batch 64 --stats-out PATH [--min-step-ms 0]

`--mode direct` reads each shard from S3 (the `minio` SDK, GPUFAIR_S3_* from
the environment) the first time a sample of it is asked for, as a trainer
without gpufair streams its data. `--mode cache` asks the node's cache service
for the dataset's local path (`gpufair.client.resolve_dataset`) and reads the
same shards from there. Everything else is identical. Per-step data wait goes
to the metrics service through `session.loop`; the rank also writes its own
totals to `<stats-out>.rank<r>.json` as a cross-check.
"""

from __future__ import annotations

import argparse
import bisect
import io
import json
import os
import time
from collections import OrderedDict
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import Dataset

MANIFEST = "manifest.json"


class ShardSource(Protocol):
    """Where shard bytes come from."""

    def read(self, name: str) -> bytes: ...


class S3Shards:
    """Shards read straight from S3, one GET per shard."""

    def __init__(self, uri: str) -> None:
        from minio import Minio

        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        e = os.environ
        self.client = Minio(e["GPUFAIR_S3_ENDPOINT"], access_key=e.get("GPUFAIR_S3_ACCESS_KEY", ""),
                            secret_key=e.get("GPUFAIR_S3_SECRET_KEY", ""), secure=False)
        self.bucket, self.prefix = bucket, prefix

    def read(self, name: str) -> bytes:
        resp = self.client.get_object(self.bucket, self.prefix + name)
        try:
            return resp.read()
        finally:
            resp.close()
            resp.release_conn()


class LocalShards:
    """Shards read from a local directory (the cache's path for the dataset)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def read(self, name: str) -> bytes:
        return (self.root / name).read_bytes()


class ShardDataset(Dataset):
    """Map-style dataset over `manifest.json`'s shards, each loaded lazily and kept in a small LRU."""

    def __init__(self, source: ShardSource, keep: int = 4) -> None:
        self.source, self.keep = source, keep
        manifest = json.loads(source.read(MANIFEST))
        self.names = [s["name"] for s in manifest["shards"]]
        self.starts = list(np.cumsum([0] + [int(s["samples"]) for s in manifest["shards"]]))
        self._lru: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self.read_s = 0.0
        self.shard_loads = 0

    def __len__(self) -> int:
        return int(self.starts[-1])

    def _shard(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        if k in self._lru:
            self._lru.move_to_end(k)
            return self._lru[k]
        t0 = time.perf_counter()
        with np.load(io.BytesIO(self.source.read(self.names[k]))) as z:
            arrays = (z["x"], z["y"])
        self.read_s += time.perf_counter() - t0
        self.shard_loads += 1
        self._lru[k] = arrays
        if len(self._lru) > self.keep:
            self._lru.popitem(last=False)
        return arrays

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        k = bisect.bisect_right(self.starts, i) - 1
        x, y = self._shard(k)
        j = i - int(self.starts[k])
        return torch.from_numpy(x[j]).float().div_(255.0).sub_(0.5), int(y[j])


def make_model() -> torch.nn.Module:
    """A small CNN for 3x32x32 images, 10 classes."""
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 8 * 8, 10))


class WaitSum:
    """A step observer summing data wait over every step (the metrics window drops the first)."""

    def __init__(self) -> None:
        self.total = 0.0
        self.first = 0.0
        self.steps = 0

    def on_step(self, record) -> None:  # noqa: ANN001 - a gpufair.client.StepRecord
        if self.steps == 0:
            self.first = record.data_wait_s
        self.total += record.data_wait_s
        self.steps += 1


def open_dataset(mode: str, uri: str) -> ShardDataset:
    """The same dataset class over S3 (direct) or over the cache's local path."""
    import gpufair.client

    if mode == "direct":
        return ShardDataset(S3Shards(uri))
    return ShardDataset(LocalShards(gpufair.client.resolve_dataset(uri, wait_s=120)))


def train(args: argparse.Namespace) -> dict:
    """Run one epoch; returns this rank's own measurements."""
    import gpufair.client
    from torch.nn.parallel import DistributedDataParallel

    rank = dist.get_rank()
    t_open = time.time()
    dataset = open_dataset(args.mode, args.uri)
    open_s = time.time() - t_open
    torch.manual_seed(0)
    ddp = DistributedDataParallel(make_model())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps = len(dataset) // args.global_batch
    session = gpufair.client.init(args.job, args.global_batch, total_samples=steps * args.global_batch, model="bench-cnn")
    waits = WaitSum()
    loop = session.loop(dataset, shuffle=False, observers=[waits])  # shard order, as a streaming reader goes
    dist.barrier()  # every rank ready: the training step starts now
    t_start = time.time()
    for x, y in loop.epoch(0):
        t0 = time.perf_counter()
        loss = loss_fn(ddp(x), y)
        loop.scale_loss(loss).backward()
        opt.step()
        opt.zero_grad()
        pad = args.min_step_ms / 1000.0 - (time.perf_counter() - t0)
        if pad > 0:
            time.sleep(pad)  # modelled accelerator time (off by default)
    dist.barrier()
    t_end = time.time()
    loop.close()
    session.close()
    return {"rank": rank, "steps": waits.steps, "start": t_start, "end": t_end, "open_s": open_s,
            "data_wait_s": waits.total, "first_wait_s": waits.first, "shard_read_s": dataset.read_s,
            "shard_loads": dataset.shard_loads, "loss": float(loss)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--job", required=True)
    p.add_argument("--mode", choices=["direct", "cache"], required=True)
    p.add_argument("--uri", required=True)
    p.add_argument("--global-batch", type=int, default=64)
    p.add_argument("--min-step-ms", type=float, default=0.0)
    p.add_argument("--stats-out", required=True)
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    stats = train(args)
    Path(f"{args.stats_out}.rank{stats['rank']}.json").write_text(json.dumps(stats))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
