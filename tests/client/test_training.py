"""ElasticLoop: per-step records, resume, and no gpufair failure reaching the loop."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
from torch.utils.data import Dataset, TensorDataset

from gpufair.client.splits import SplitCommand
from gpufair.client.training import ElasticLoop, StepRecord


class Recorder:
    def __init__(self) -> None:
        self.records: list[StepRecord] = []

    def on_step(self, record: StepRecord) -> None:
        self.records.append(record)


class SlowDataset(Dataset[int]):
    """Each item takes `delay` seconds to load."""

    def __init__(self, n: int, delay: float) -> None:
        self.n, self.delay = n, delay

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        time.sleep(self.delay)
        return i


class BrokenExchanger:
    def start_all_gather(self, row: Sequence[int]) -> Callable[[], list[list[int]]]:
        def result() -> list[list[int]]:
            raise RuntimeError("peer gone")

        return result


class BrokenSource:
    def start(self, offer) -> None:  # type: ignore[no-untyped-def]
        raise RuntimeError("control plane unreachable")

    def stop(self) -> None:
        raise RuntimeError("still unreachable")


def data(n: int = 40) -> TensorDataset:
    return TensorDataset(torch.arange(n))


def test_records_split_time_between_data_wait_and_the_loop_body():
    recorder = Recorder()
    loop = ElasticLoop(SlowDataset(12, 0.002), 4, observers=[recorder])
    body = 0.02
    for _ in loop.epoch(0):
        time.sleep(body)  # the "training step" being measured
    assert [r.global_step for r in recorder.records] == [0, 1, 2]
    for record in recorder.records:
        assert record.compute_s >= body
        assert record.data_wait_s >= 4 * 0.002
        assert record.local_batch_size == record.global_batch_size == 4


def test_counters_are_cumulative_over_epochs_and_resume():
    recorder = Recorder()
    loop = ElasticLoop(data(40), 8, observers=[recorder], drop_last=True)
    list(loop.epoch(0))
    list(loop.epoch(1, start_step=2))  # as after a restart at epoch 1, step 2
    steps = [r.steps_total for r in recorder.records]
    assert steps == [1, 2, 3, 4, 5, 8, 9, 10]
    assert recorder.records[-1].global_samples_total == 10 * 8
    assert recorder.records[-1].local_samples_total == 8 * 8


def test_resumed_epoch_yields_the_remaining_batches():
    full = [b[0].tolist() for b in ElasticLoop(data(), 8, seed=4).epoch(3)]
    resumed = [b[0].tolist() for b in ElasticLoop(data(), 8, seed=4).epoch(3, start_step=2)]
    assert resumed == full[2:]


def test_a_failing_agreement_or_command_source_never_reaches_the_loop(caplog):
    loop = ElasticLoop(
        data(), 8, rank=0, world_size=2, exchanger=BrokenExchanger(), command_source=BrokenSource(), sync_every=1
    )
    loop.offer(SplitCommand(1, 0, (6, 2)))
    sizes = [len(b[0]) for b in loop.epoch(0)]
    loop.close()
    assert sizes == [4] * 5  # the split in force stays
    assert "split agreement failed" in caplog.text
    assert "command source start failed" in caplog.text


def test_a_split_offered_mid_epoch_changes_the_local_batch_at_its_step():
    recorder = Recorder()
    loop = ElasticLoop(
        data(48), 8, rank=1, world_size=2, observers=[recorder], exchanger=_Solo(rank=1), sync_every=1
    )
    for step, _ in enumerate(loop.epoch(0)):
        if step == 1:
            loop.offer(SplitCommand(1, 3, (5, 3)))
    assert [r.local_batch_size for r in recorder.records] == [4, 4, 4, 3, 3, 3]
    assert [r.split_version for r in recorder.records] == [0, 0, 0, 1, 1, 1]


def test_loss_scaling_follows_the_local_share():
    loop = ElasticLoop(data(16), 8, rank=0, world_size=2, initial_split=(6, 2), exchanger=_Solo(rank=0))
    loss = torch.tensor(2.0)
    assert loop.scale_loss(loss) is loss  # before the first batch: unchanged
    next(iter(loop.epoch(0)))
    assert loop.local_batch_size == 6
    assert loop.scale_loss(loss).item() == 2.0 * 6 * 2 / 8


def test_leaving_an_epoch_early_still_reports_the_last_step():
    recorder = Recorder()
    batches = ElasticLoop(data(), 8, observers=[recorder]).epoch(0)
    next(batches), next(batches)
    batches.close()  # what a `break` out of the for loop does
    assert [r.global_step for r in recorder.records] == [0, 1]


class _Solo:
    """Stands in for a 2-rank all-gather where the other rank has nothing to say."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def start_all_gather(self, row: Sequence[int]) -> Callable[[], list[list[int]]]:
        # Nothing pending, nothing loaded beyond this rank, the same agreement interval.
        other = [-1, 0, row[2], 0, *([0] * (len(row) - 5)), row[-1]]
        rows = [list(row), other] if self.rank == 0 else [other, list(row)]
        return lambda: rows


def test_records_match_the_batches_a_prefetching_loader_delivers():
    recorder = Recorder()
    loop = ElasticLoop(
        data(96), 8, rank=0, world_size=2, observers=[recorder], exchanger=_Solo(rank=0), num_workers=1,
        sync_every=1,
    )
    sizes = []
    for step, (batch,) in enumerate(loop.epoch(0)):
        sizes.append(len(batch))
        if step == 2:
            loop.offer(SplitCommand(1, 0, (7, 1)))
    assert sizes == [r.local_batch_size for r in recorder.records]
    assert sizes[:4] == [4] * 4 and sizes[-1] == 7  # the worker had steps ahead loaded
