"""Elastic batch sampler: exact global batches, exactly-once epochs, determinism, resume."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, TensorDataset

from gpufair.client.sampler import ElasticBatchSampler, even_split, proportional_split
from gpufair.common.errors import InvalidArgument


def changing_splits(changes: dict[int, tuple[int, ...]], first: tuple[int, ...]):
    """A split provider whose split changes at the given global steps."""

    def provider(step: int) -> tuple[int, ...]:
        current = first
        for at in sorted(changes):
            if at <= step:
                current = changes[at]
        return current

    return provider


def samplers(n: int, b: int, w: int, provider, **kw) -> list[ElasticBatchSampler]:
    return [ElasticBatchSampler(n, b, rank=r, world_size=w, split_provider=provider, **kw) for r in range(w)]


def run_epoch(ranks: Sequence[ElasticBatchSampler], epoch: int, start: int = 0) -> list[list[list[int]]]:
    """Per step, every rank's local batch."""
    for s in ranks:
        s.set_epoch(epoch, start)
    return [list(batches) for batches in zip(*(iter(s) for s in ranks), strict=True)]


@st.composite
def split_of(draw, b: int, w: int) -> tuple[int, ...]:
    if w == 1:
        return (b,)
    cuts = sorted(draw(st.lists(st.integers(1, b - 1), min_size=w - 1, max_size=w - 1, unique=True)))
    bounds = [0, *cuts, b]
    return tuple(bounds[i + 1] - bounds[i] for i in range(w))


@st.composite
def scenarios(draw):
    w = draw(st.integers(1, 4))
    b = draw(st.integers(w, 24))
    n = draw(st.integers(b, 6 * b + b - 1))
    first = draw(split_of(b, w))
    steps = n // b + 1
    changes = draw(st.dictionaries(st.integers(0, 2 * steps), split_of(b, w), max_size=4))
    drop_last = draw(st.booleans())
    return n, b, w, first, changes, drop_last


@settings(max_examples=150, deadline=None)
@given(scenarios(), st.integers(0, 3))
def test_every_sample_seen_once_and_global_batches_exact_across_split_changes(scenario, epoch):
    n, b, w, first, changes, drop_last = scenario
    ranks = samplers(n, b, w, changing_splits(changes, first), seed=7, drop_last=drop_last)
    steps = run_epoch(ranks, epoch)
    seen = [i for step in steps for local in step for i in local]
    order = ranks[0].order(epoch).tolist()
    assert len(seen) == len(set(seen)) == ranks[0].samples_per_epoch
    # Global batch k is the k-th slice of the epoch order, whatever the split.
    for k, step in enumerate(steps):
        joined = [i for local in step for i in local]
        assert joined == order[k * b : k * b + len(joined)]
        assert all(len(local) >= 1 for local in step)
        if (k + 1) * b <= n:
            assert len(joined) == b
            split = changing_splits(changes, first)(ranks[0].global_step(epoch, k))
            assert [len(local) for local in step] == list(split)
    tail = n % b
    if drop_last or tail < w:
        assert len(seen) == n - tail
    else:
        assert len(seen) == n


def test_same_seed_same_batches_other_seed_or_epoch_differs():
    provider = changing_splits({3: (48, 16)}, (32, 32))
    a = run_epoch(samplers(640, 64, 2, provider, seed=1), epoch=0)
    b = run_epoch(samplers(640, 64, 2, provider, seed=1), epoch=0)
    other_seed = run_epoch(samplers(640, 64, 2, provider, seed=2), epoch=0)
    other_epoch = run_epoch(samplers(640, 64, 2, provider, seed=1), epoch=1)
    assert a == b
    assert a != other_seed
    assert a != other_epoch


@pytest.mark.parametrize("start", [0, 1, 4, 9, 10])
def test_resume_at_a_step_gives_the_same_remaining_batches(start):
    provider = changing_splits({13: (10, 20, 34), 16: (1, 1, 62)}, (20, 20, 24))
    full = run_epoch(samplers(700, 64, 3, provider, seed=5), epoch=1)
    resumed_ranks = samplers(700, 64, 3, provider, seed=5)
    resumed = run_epoch(resumed_ranks, epoch=1, start=start)
    assert resumed == full[start:]
    assert len(resumed_ranks[0]) == len(full) - start


def test_without_shuffle_the_order_is_the_dataset_order():
    ranks = samplers(8, 4, 2, lambda _s: (3, 1), shuffle=False)
    assert run_epoch(ranks, 0) == [[[0, 1, 2], [3]], [[4, 5, 6], [7]]]


def test_works_as_a_dataloader_batch_sampler_with_workers():
    data = TensorDataset(torch.arange(100))
    provider = changing_splits({2: (5, 11)}, (8, 8))
    per_rank = []
    for sampler in samplers(100, 16, 2, provider, seed=3):
        loader = DataLoader(data, batch_sampler=sampler, num_workers=1)
        per_rank.append([batch[0].tolist() for batch in loader])
    expected = run_epoch(samplers(100, 16, 2, provider, seed=3), 0)
    assert [list(step) for step in zip(*per_rank)] == expected


def test_a_bad_split_from_the_provider_is_refused_with_a_clear_error():
    (sampler,) = samplers(10, 4, 1, lambda _s: (3,))
    with pytest.raises(InvalidArgument, match="sums to 3"):
        list(sampler)


@pytest.mark.parametrize(
    ("n", "b", "rank", "w", "match"),
    [(10, 4, 2, 2, "rank 2"), (10, 1, 0, 2, "smaller than world size"), (3, 4, 0, 1, "smaller than one global batch")],
)
def test_bad_arguments_raise_invalid_argument(n, b, rank, w, match):
    with pytest.raises(InvalidArgument, match=match):
        ElasticBatchSampler(n, b, rank=rank, world_size=w, split_provider=lambda _s: (b,))


def test_resume_past_the_end_of_an_epoch_is_refused():
    (sampler,) = samplers(10, 4, 1, lambda _s: (4,))
    with pytest.raises(InvalidArgument, match="step 3"):
        sampler.set_epoch(0, 3)


@given(st.lists(st.integers(1, 50), min_size=1, max_size=6), st.data())
def test_proportional_split_sums_to_total_and_gives_everyone_one(split, data):
    total = data.draw(st.integers(len(split), sum(split)))
    parts = proportional_split(split, total)
    assert sum(parts) == total
    assert min(parts) >= 1


def test_even_split_spreads_the_remainder():
    assert even_split(10, 3) == (4, 3, 3)
    with pytest.raises(InvalidArgument):
        even_split(2, 3)
