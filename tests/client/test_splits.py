"""Split agreement: all ranks switch at the same step, whatever reaches whom and when."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufair.client.splits import LocalExchanger, SplitAgreement, SplitCommand


class ThreadGroup:
    """An in-process all-gather for ranks that run as threads."""

    def __init__(self, world_size: int) -> None:
        self._barrier = threading.Barrier(world_size, timeout=10)
        self._rows: list[list[int]] = [[] for _ in range(world_size)]

    def view(self, rank: int) -> _RankView:
        return _RankView(self, rank)

    def gather(self, rank: int, row: Sequence[int]) -> list[list[int]]:
        self._rows[rank] = list(row)
        self._barrier.wait()
        out = [list(r) for r in self._rows]
        self._barrier.wait()  # nobody overwrites a slot before all have read
        return out


class _RankView:
    def __init__(self, group: ThreadGroup, rank: int) -> None:
        self._group, self._rank = group, rank

    def start_all_gather(self, row: Sequence[int]) -> Callable[[], list[list[int]]]:
        return lambda: self._group.gather(self._rank, row)


# offers[rank][step] = commands offered to that rank just before its step
Offers = dict[int, dict[int, list[SplitCommand]]]


def simulate(
    world: int, total: int, steps: int, offers: Offers, *, every: int = 1, prefetch: int = 0,
    paces: Sequence[Sequence[float]] | None = None, overlap: bool = False,
) -> tuple[list[list[tuple[int, ...]]], list[dict[int, tuple[int, ...]]], list[SplitAgreement]]:
    """Run `steps` steps on `world` thread ranks; per rank, the split used at each step.

    Like a prefetching DataLoader, each rank asks for steps up to `prefetch`
    ahead of the one it trains; the first answer for each step is recorded.
    Given `paces` (per rank, each step's time), the ranks agree about every
    0.1 s at those paces (at most `every` steps apart) instead of every `every`.
    With `overlap`, each rank follows the training loop's order (the next
    step's exchange launched before the body, a deferred row sent after it)
    and the step's commands arrive during the body, after that launch.
    """
    group = ThreadGroup(world)
    first = tuple(total // world + (1 if r < total % world else 0) for r in range(world))
    agreements = [
        SplitAgreement(first, total, world_size=world, exchanger=group.view(r), every=every,
                       every_s=0.1 if paces is not None else None) for r in range(world)
    ]
    used: list[list[tuple[int, ...]]] = [[] for _ in range(world)]
    first_answers: list[dict[int, tuple[int, ...]]] = [{} for _ in range(world)]
    errors: list[BaseException] = []

    def rank_main(rank: int) -> None:
        agreement = agreements[rank]
        try:
            for step in range(steps):
                if overlap:
                    agreement.send_deferred()
                else:
                    for command in offers.get(rank, {}).get(step, []):
                        agreement.offer(command)
                if paces is not None and step:
                    agreement.note_step_s(paces[rank][step - 1])
                if overlap:
                    agreement.complete() if step else agreement.sync(0)
                else:
                    agreement.sync(step)
                for ahead in range(step, step + prefetch + 1):
                    first_answers[rank].setdefault(ahead, agreement.split_for_step(ahead))
                used[rank].append(agreement.split_for_step(step))
                if overlap:
                    agreement.launch(step + 1)
                    for command in offers.get(rank, {}).get(step, []):  # during the body
                        agreement.offer(command)
            if overlap:
                agreement.complete()  # `close`: the last launch, sent late or not
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    return used, first_answers, agreements


def switch_step(used: list[tuple[int, ...]], split: tuple[int, ...]) -> int:
    return used.index(split)


def test_command_reaching_ranks_at_different_times_applies_at_its_step_on_both():
    command = SplitCommand(version=1, apply_step=4, split=(48, 16))
    used, _, _ = simulate(2, 64, 10, {0: {2: [command]}, 1: {6: [command]}})
    assert used[0] == used[1]
    assert switch_step(used[0], (48, 16)) == 4
    assert used[0][:4] == [(32, 32)] * 4


def test_command_reaching_only_a_non_zero_rank_still_applies_everywhere():
    command = SplitCommand(version=3, apply_step=5, split=(10, 54))
    used, _, agreements = simulate(2, 64, 8, {1: {1: [command]}})
    assert used[0] == used[1]
    assert switch_step(used[0], (10, 54)) == 5
    assert all(a.stats().version == 3 for a in agreements)


def test_late_command_applies_at_the_next_agreement_step_on_every_rank():
    # Offered before step 4 with apply_step long past; agreements at 0, 3, 6, ...
    late = SplitCommand(version=1, apply_step=0, split=(1, 2, 61))
    used, _, _ = simulate(3, 64, 10, {0: {4: [late]}, 2: {5: [late]}}, every=3)
    assert used[0] == used[1] == used[2]
    assert switch_step(used[0], (1, 2, 61)) == 6


def test_prefetched_steps_are_never_revised():
    command = SplitCommand(version=1, apply_step=3, split=(40, 24))
    used, answers, _ = simulate(2, 64, 12, {0: {3: [command]}}, prefetch=2)
    assert used[0] == used[1]
    # By the agreement at step 3, step 2 had already handed steps up to 4 to the prefetcher.
    assert switch_step(used[0], (40, 24)) == 5
    for rank in range(2):
        assert [answers[rank][s] for s in range(12)] == used[rank]


def test_newer_command_supersedes_one_not_yet_in_force():
    old = SplitCommand(version=1, apply_step=8, split=(40, 24))
    new = SplitCommand(version=2, apply_step=5, split=(20, 44))
    used, _, agreements = simulate(2, 64, 12, {0: {2: [old], 4: [new]}})
    assert used[0] == used[1]
    assert (40, 24) not in used[0]
    assert switch_step(used[0], (20, 44)) == 5
    assert [e.version for e in agreements[0].schedule] == [0, 2]


@pytest.mark.parametrize(
    "command",
    [
        SplitCommand(1, 0, (32,)),  # wrong length
        SplitCommand(1, 0, (32, 31)),  # wrong sum
        SplitCommand(1, 0, (64, 0)),  # a rank without samples
        SplitCommand(-1, 0, (32, 32)),  # bad version
        SplitCommand(1, -5, (32, 32)),  # bad step
        SplitCommand(1, 0, ("32", 32)),  # type: ignore[arg-type]
        "not a command",
    ],
)
def test_malformed_commands_are_rejected_and_counted_without_raising(command, caplog):
    agreement = SplitAgreement((32, 32), 64, world_size=2, exchanger=LocalExchanger())
    assert agreement.offer(command) is False  # type: ignore[arg-type]
    assert agreement.stats().rejected == 1
    assert "rejected" in caplog.text


def test_versions_not_newer_than_known_are_ignored():
    agreement = SplitAgreement((64,), 64, world_size=1, exchanger=LocalExchanger(), initial_version=4)
    assert agreement.offer(SplitCommand(4, 0, (64,))) is False
    assert agreement.offer(SplitCommand(5, 0, (64,))) is True
    assert agreement.offer(SplitCommand(5, 0, (64,))) is False
    stats = agreement.stats()
    assert (stats.accepted, stats.ignored, stats.rejected) == (1, 2, 0)


def test_without_commands_the_split_stays():
    used, _, agreements = simulate(2, 10, 5, {})
    assert used[0] == used[1] == [(5, 5)] * 5
    assert agreements[0].stats().agreements == 5


def test_offer_is_safe_from_many_threads_and_keeps_the_newest():
    agreement = SplitAgreement((32, 32), 64, world_size=2, exchanger=LocalExchanger())

    def offer_range(start: int) -> Callable[[], None]:
        return lambda: [agreement.offer(SplitCommand(v, 0, (v % 63 + 1, 63 - v % 63))) for v in range(start, 400, 4)]

    threads = [threading.Thread(target=offer_range(s)) for s in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    agreement.sync(0)
    assert agreement.stats().version == 399
    assert agreement.split_for_step(0) == (399 % 63 + 1, 63 - 399 % 63)


split2 = st.integers(1, 63).map(lambda a: (a, 64 - a))
command_st = st.builds(SplitCommand, st.integers(1, 6), st.integers(0, 25), split2)
offers_st = st.dictionaries(
    st.integers(0, 1), st.dictionaries(st.integers(0, 19), st.lists(command_st, max_size=2), max_size=4), max_size=2
)


@settings(max_examples=40, deadline=None)
@given(offers_st, st.integers(1, 4), st.integers(0, 3))
def test_ranks_always_agree_and_never_revise_a_handed_out_step(offers, every, prefetch):
    used, answers, agreements = simulate(2, 64, 20, offers, every=every, prefetch=prefetch)
    assert used[0] == used[1]
    for rank in range(2):
        assert [answers[rank][s] for s in range(20)] == used[rank]
    assert agreements[0].schedule == agreements[1].schedule
    # A split never applies before the step its command names.
    # (Several commands may share a version and split with different steps: the earliest counts.)
    named = [(c.version, c.split, c.apply_step) for per in offers.values() for cs in per.values() for c in cs]
    for entry in agreements[0].schedule[1:]:
        assert entry.effective_step >= min(step for v, s, step in named if v == entry.version and s == entry.split)


@settings(max_examples=60, deadline=None)
@given(offers_st, st.integers(1, 6), st.integers(0, 3),
       st.lists(st.lists(st.floats(0.005, 0.3), min_size=20, max_size=20), min_size=2, max_size=2), st.booleans())
def test_ranks_agree_at_their_own_paces_too(offers, every, prefetch, paces, overlap):
    """Each rank proposes its own agreement interval from its own step times,
    which change between exchanges, and (in the training loop's order, with
    `overlap`) sends its row before or after the body by its own pace; the
    ranks still exchange at the same steps (else the all-gather would hang),
    switch together and never revise a loaded step."""
    used, answers, agreements = simulate(2, 64, 20, offers, every=every, prefetch=prefetch, paces=paces, overlap=overlap)
    assert used[0] == used[1]
    for rank in range(2):
        assert [answers[rank][s] for s in range(20)] == used[rank]
    assert agreements[0].schedule == agreements[1].schedule
    assert agreements[0].stats().agreements == agreements[1].stats().agreements


def test_a_rank_with_long_steps_sends_its_row_after_the_body():
    """A command that arrives during a 250 ms step applies at the next step, not a
    step later (the exchange launched before the body could not carry it)."""
    command = SplitCommand(version=1, apply_step=0, split=(60, 4))
    long_steps = [[0.25] * 10, [0.25] * 10]
    for to_rank in (0, 1):
        used, _, agreements = simulate(2, 64, 10, {to_rank: {3: [command]}}, paces=long_steps, overlap=True)
        assert used[0] == used[1]
        assert switch_step(used[0], (60, 4)) == 4
        assert agreements[0].schedule == agreements[1].schedule
    # Sending before the body (fixed interval, no pace), the same command waits a step more.
    used, _, _ = simulate(2, 64, 10, {0: {3: [command]}}, overlap=True)
    assert switch_step(used[0], (60, 4)) == 5


def test_asking_for_a_step_beyond_the_launch_completes_the_exchange_first():
    agreement = SplitAgreement((32, 32), 64, world_size=2, exchanger=LocalExchanger())
    agreement.split_for_step(0)
    agreement.offer(SplitCommand(1, 0, (60, 4)))
    agreement.launch(1)
    assert agreement.stats().agreements == 0  # in flight, overlapping the step body
    assert agreement.split_for_step(1) == (60, 4)
    assert agreement.stats().agreements == 1
    assert agreement.split_for_step(0) == (32, 32)


def test_the_gloo_exchanger_gathers_every_rank_row_and_keeps_its_tensors(tmp_path, monkeypatch):
    """Two ranks (threads, each with its own real gloo group) exchange rows of
    changing content and length. The tensors handed to gloo are the same ones
    every time: were they dropped after each exchange, gloo's worker thread
    could drop the last reference and need the GIL as the interpreter exits."""
    import torch.distributed as dist

    from gpufair.client import splits

    given_out: list[list[object]] = [[], []]  # per rank, the first tensor gloo wrote into, each time
    real = dist.all_gather

    def spy(out, mine, group=None, async_op=False):  # type: ignore[no-untyped-def]
        given_out[group.rank()].append(out[0])
        return real(out, mine, group=group, async_op=async_op)

    monkeypatch.setattr(splits.dist, "all_gather", spy)
    store = dist.FileStore(str(tmp_path / "store"), 2)
    rows = [[[r, 10 + r, 7]] * 3 + [[r, 2 * r]] for r in range(2)]  # the last row is shorter
    got: list[list[list[list[int]]]] = [[], []]
    errors: list[BaseException] = []

    def rank(r: int) -> None:
        try:
            exchanger = splits.TorchExchanger(dist.ProcessGroupGloo(store, r, 2), 2)
            for row in rows[r]:
                got[r].append(exchanger.start_all_gather(row)())
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and not any(t.is_alive() for t in threads)
    for r in range(2):
        assert got[r] == [[rows[0][k], rows[1][k]] for k in range(4)]
        assert given_out[r][1] is given_out[r][0] and given_out[r][2] is given_out[r][0]
