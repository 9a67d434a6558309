"""The model zoo: the image models of the reference experiments plus quick ones.

AlexNet, ResNet (18- and 50-style), ResNeXt and DenseNet come from torchvision
when it imports and the input is ImageNet-sized (its definitions assume that:
AlexNet collapses below ~63 px). Otherwise small built-in variants are used:
plain torch.nn, the same family structure (residual basic blocks, grouped-conv
bottlenecks, dense blocks) with a configurable base width, so a CPU step at
32x32 takes milliseconds. The scheduler only needs a model's *relative* speed
on each device, which these keep.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from gpufair.client.workloads.blocks import (
    AlexNetSmall,
    DenseNetSmall,
    ResNetSmall,
    SmallCnn,
    TinyMlp,
)
from gpufair.common.errors import InvalidArgument

logger = logging.getLogger(__name__)

#: Below this input size torchvision's ImageNet definitions do not fit.
TORCHVISION_MIN_IMAGE = 64
_IMPLS = ("auto", "builtin", "torchvision")


@dataclass(frozen=True)
class ZooEntry:
    """How to build one zoo model, built-in and (optionally) from torchvision."""

    name: str
    family: str
    builtin: Callable[[int, int, int], nn.Module]  # (num_classes, image_size, width)
    torchvision_name: str | None


def _entries() -> dict[str, ZooEntry]:
    # A function, not a module-level dict: nothing is built at import time.
    rows = [
        ZooEntry("alexnet", "alexnet", lambda k, s, w: AlexNetSmall(k, s, w), "alexnet"),
        ZooEntry("resnet18", "resnet",
                 lambda k, s, w: ResNetSmall(k, w, (2, 2, 2, 2), bottleneck=False), "resnet18"),
        ZooEntry("resnet50", "resnet",
                 lambda k, s, w: ResNetSmall(k, w, (3, 4, 6, 3), bottleneck=True), "resnet50"),
        ZooEntry("resnext50", "resnext",
                 lambda k, s, w: ResNetSmall(k, w, (3, 4, 6, 3), bottleneck=True, groups=8),
                 "resnext50_32x4d"),
        ZooEntry("densenet121", "densenet",
                 lambda k, s, w: DenseNetSmall(k, w, (6, 12, 24, 16)), "densenet121"),
        ZooEntry("densenet-small", "densenet",
                 lambda k, s, w: DenseNetSmall(k, w, (2, 2, 2)), None),
        ZooEntry("cnn", "cnn", lambda k, s, w: SmallCnn(k, w), None),
        ZooEntry("mlp", "mlp", lambda k, s, w: TinyMlp(k, s, w * 8), None),
    ]
    return {e.name: e for e in rows}


def list_models() -> list[str]:
    """Names `build_model` accepts, sorted."""
    return sorted(_entries())


def torchvision_available() -> bool:
    """Whether `import torchvision` works here (it does not beside CPU torch)."""
    try:
        importlib.import_module("torchvision")
    except Exception:  # noqa: BLE001 - a broken install is as good as absent
        return False
    return True


def _resolve_impl(entry: ZooEntry, impl: str, image_size: int) -> str:
    if impl not in _IMPLS:
        raise InvalidArgument(f"impl {impl!r} is not one of {', '.join(_IMPLS)}")
    if impl == "builtin":
        return impl
    usable = entry.torchvision_name is not None and torchvision_available()
    if impl == "torchvision":
        if not usable:
            raise InvalidArgument(
                f"model {entry.name!r} has no torchvision definition here "
                "(torchvision missing or model is built-in only)"
            )
        if image_size < TORCHVISION_MIN_IMAGE:
            raise InvalidArgument(
                f"torchvision models need image_size >= {TORCHVISION_MIN_IMAGE}, got {image_size}"
            )
        return impl
    return "torchvision" if usable and image_size >= TORCHVISION_MIN_IMAGE else "builtin"


def build_model(
    name: str,
    *,
    num_classes: int = 10,
    image_size: int = 32,
    width: int = 8,
    impl: str = "auto",
) -> nn.Module:
    """Build zoo model `name` for `image_size`-pixel RGB inputs.

    `impl` is "auto" (torchvision when it imports and the input is at least
    64 px, else built-in), "builtin" or "torchvision". `width` is the built-in
    variants' base channel count (torchvision models ignore it).
    """
    entries = _entries()
    entry = entries.get(name)
    if entry is None:
        raise InvalidArgument(f"unknown model {name!r}; known models: {', '.join(sorted(entries))}")
    if num_classes < 1:
        raise InvalidArgument(f"num_classes must be >= 1, got {num_classes}")
    if image_size < 8:
        raise InvalidArgument(f"image_size must be >= 8 pixels, got {image_size}")
    if width < 1:
        raise InvalidArgument(f"width must be >= 1, got {width}")
    if _resolve_impl(entry, impl, image_size) == "torchvision":
        models = importlib.import_module("torchvision.models")
        return getattr(models, str(entry.torchvision_name))(weights=None, num_classes=num_classes)
    return entry.builtin(num_classes, image_size, width)


def synthetic_batch(
    batch: int,
    image_size: int,
    num_classes: int,
    device: torch.device | str = "cpu",
    *,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random images (batch, 3, size, size) and integer labels, on `device`.

    Randomly generated data, as the reference methodology uses: the profiler
    measures compute, not a data pipeline.
    """
    if batch < 1 or image_size < 1 or num_classes < 1:
        raise InvalidArgument(
            f"batch, image_size and num_classes must be >= 1, got {batch}, {image_size}, {num_classes}"
        )
    x = torch.randn(batch, 3, image_size, image_size, generator=generator)
    y = torch.randint(0, num_classes, (batch,), generator=generator)
    return x.to(device), y.to(device)
