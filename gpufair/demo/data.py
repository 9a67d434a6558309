"""The demo's dataset (synthetic images in S3) and the pipeline that reads it."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

BUCKET = "gpufair-demo"
PREFIX = "images/"
IMAGE_SHAPE = (3, 16, 16)
CLASSES = 10


def make_shards(n_images: int, shards: int, seed: int = 0) -> list[tuple[str, bytes]]:
    """Random images whose class is a fixed linear function of the pixels (so training learns)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(n_images, *IMAGE_SHAPE), dtype=np.uint8)
    w = rng.standard_normal((int(np.prod(IMAGE_SHAPE)), CLASSES)).astype(np.float32)
    y = ((x.reshape(n_images, -1).astype(np.float32) / 255.0 - 0.5) @ w).argmax(axis=1).astype(np.int64)
    out = []
    for i, (xs, ys) in enumerate(zip(np.array_split(x, shards), np.array_split(y, shards))):
        buf = io.BytesIO()
        np.savez(buf, x=xs, y=ys)
        out.append((f"{PREFIX}shard-{i:03d}.npz", buf.getvalue()))
    return out


def upload(client, n_images: int = 4096, shards: int = 8) -> int:
    """Create the bucket and put the shards; returns the bytes uploaded."""
    if not client.bucket_exists(BUCKET):
        client.make_bucket(BUCKET)
    total = 0
    for key, data in make_shards(n_images, shards):
        client.put_object(BUCKET, key, io.BytesIO(data), len(data))
        total += len(data)
    return total


def load_local(directory: Path):
    """The shards of a resolved dataset directory as one TensorDataset."""
    import torch
    from torch.utils.data import TensorDataset

    xs, ys = [], []
    for f in sorted(Path(directory).glob("shard-*.npz")):
        with np.load(f) as z:
            xs.append(z["x"])
            ys.append(z["y"])
    if not xs:
        raise FileNotFoundError(f"no shard-*.npz under {directory}")
    x = torch.from_numpy(np.concatenate(xs)).float().div_(255.0).sub_(0.5)
    return TensorDataset(x, torch.from_numpy(np.concatenate(ys)))


def pipeline_yaml() -> str:
    return (Path(__file__).resolve().parents[2] / "examples" / "pipelines" / "demo-train.yaml").read_text()
