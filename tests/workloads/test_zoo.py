"""The model zoo: every model trains a step at a tiny size; bad names are refused."""

from __future__ import annotations

import pytest
import torch

from gpufair.client.workloads.zoo import build_model, list_models, synthetic_batch, torchvision_available
from gpufair.common.errors import InvalidArgument


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.mark.parametrize("name", list_models())
def test_every_model_runs_forward_and_backward_at_a_tiny_size(name: str) -> None:
    torch.manual_seed(0)
    model = build_model(name, num_classes=5, image_size=16, width=2, impl="builtin")
    x, y = synthetic_batch(4, 16, 5, "cpu")
    logits = model(x)
    assert logits.shape == (4, 5)
    torch.nn.functional.cross_entropy(logits, y).backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)


def test_the_reference_families_are_in_the_zoo() -> None:
    names = set(list_models())
    assert {"alexnet", "resnet18", "resnet50", "resnext50", "densenet121", "mlp", "cnn"} <= names


def test_width_scales_the_builtin_models() -> None:
    def size(width: int) -> int:
        return sum(p.numel() for p in build_model("resnet18", width=width, impl="builtin").parameters())

    assert size(8) > 3 * size(4)


def test_resnext_uses_grouped_convolutions_and_resnet50_does_not() -> None:
    def grouped(name: str) -> bool:
        model = build_model(name, width=8, impl="builtin")
        return any(isinstance(m, torch.nn.Conv2d) and m.groups > 1 for m in model.modules())

    assert grouped("resnext50") and not grouped("resnet50")


def test_unknown_model_names_the_known_ones() -> None:
    with pytest.raises(InvalidArgument, match="known models: .*resnet18"):
        build_model("vgg99")


@pytest.mark.parametrize("kwargs", [{"num_classes": 0}, {"image_size": 4}, {"width": 0}, {"impl": "onnx"}])
def test_bad_sizes_are_invalid_arguments(kwargs: dict) -> None:
    with pytest.raises(InvalidArgument):
        build_model("cnn", **kwargs)


@pytest.mark.skipif(torchvision_available(), reason="torchvision is installed here")
def test_asking_for_torchvision_without_it_is_a_clear_error() -> None:
    with pytest.raises(InvalidArgument, match="torchvision"):
        build_model("resnet18", image_size=224, impl="torchvision")


def test_auto_falls_back_to_builtin_without_torchvision_or_at_small_sizes() -> None:
    model = build_model("alexnet", image_size=32)  # torchvision's AlexNet cannot take 32 px
    assert model(synthetic_batch(2, 32, 10)[0]).shape == (2, 10)


def test_synthetic_batch_has_the_asked_shapes_and_label_range() -> None:
    x, y = synthetic_batch(6, 12, 3, "cpu")
    assert x.shape == (6, 3, 12, 12) and y.shape == (6,)
    assert int(y.min()) >= 0 and int(y.max()) < 3
    with pytest.raises(InvalidArgument):
        synthetic_batch(0, 12, 3)
