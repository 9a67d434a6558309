"""Loss scaling: with uneven local batches, DDP's average equals the global-batch mean."""

from __future__ import annotations

import pytest
import torch

from gpufair.client.gradients import WeightedAverageHook, loss_scale, scale_loss
from gpufair.common.errors import InvalidArgument


def grads(model: torch.nn.Module, loss: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad()
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


def ddp_average(per_rank: list[list[torch.Tensor]]) -> list[torch.Tensor]:
    """What DDP's default hook computes: the equal-weight mean over ranks."""
    return [torch.stack(parts).mean(0) for parts in zip(*per_rank, strict=True)]


@pytest.mark.parametrize("split", [(48, 16), (1, 63), (10, 20, 30, 4)])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_scaled_losses_average_to_the_global_batch_gradient(split, reduction):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 1)).double()
    x, y = torch.randn(sum(split), 5, dtype=torch.float64), torch.randn(sum(split), 1, dtype=torch.float64)
    loss_fn = torch.nn.MSELoss(reduction=reduction)
    expected = grads(model, torch.nn.functional.mse_loss(model(x), y))
    per_rank, plain = [], []
    for xs, ys in zip(x.split(list(split)), y.split(list(split)), strict=True):
        local = loss_fn(model(xs), ys)
        per_rank.append(grads(model, scale_loss(local, len(xs), len(x), len(split), reduction)))
        plain.append(grads(model, loss_fn(model(xs), ys) / (len(xs) if reduction == "sum" else 1)))
    for got, want in zip(ddp_average(per_rank), expected, strict=True):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-10)
    # Plain DDP averaging is measurably wrong with these splits.
    assert any(not torch.allclose(g, w) for g, w in zip(ddp_average(plain), expected, strict=True))


def test_even_split_needs_no_scaling():
    assert loss_scale(32, 64, 2) == 1.0


@pytest.mark.parametrize(
    ("local_n", "global_n", "world", "reduction"),
    [(5, 4, 2, "mean"), (-1, 4, 2, "mean"), (1, 0, 2, "mean"), (1, 4, 0, "mean"), (1, 4, 2, "max")],
)
def test_bad_arguments_raise_invalid_argument(local_n, global_n, world, reduction):
    with pytest.raises(InvalidArgument):
        scale_loss(torch.tensor(1.0), local_n, global_n, world, reduction)  # type: ignore[arg-type]


def test_hook_weight_is_the_local_share_and_checked():
    hook = WeightedAverageHook()
    hook.set_batch(48, 64)
    assert hook.weight == 0.75
    with pytest.raises(InvalidArgument):
        hook.set_batch(65, 64)
