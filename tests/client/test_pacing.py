"""Paced ranks: shares travel with the split, every rank paces and holds
from the same step, a held job resumes where it held, a lost control plane
releases it, and a paced rank's GPU time goes to its neighbours."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import torch
from torch.utils.data import TensorDataset

from gpufair.client.splits import LocalExchanger, SplitAgreement, SplitCommand
from gpufair.client.training import ElasticLoop
from gpufair.common.errors import InvalidArgument

from test_splits import ThreadGroup


def test_shares_travel_with_the_split_and_a_change_of_shares_alone_applies_at_once():
    group = ThreadGroup(2)
    agreements = [SplitAgreement((32, 32), 64, world_size=2, exchanger=group.view(r), every=5)
                  for r in range(2)]
    agreements[1].offer(SplitCommand(1, 0, (32, 32), (0.5, 0.25), "pace"))

    def rank(r: int) -> None:
        agreements[r].split_for_step(7)  # steps up to 7 handed out (a prefetching loader)
        agreements[r].sync(5)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    [t.start() for t in threads]
    [t.join(10) for t in threads]
    for a in agreements:
        entry = a.entry_for_step(5)
        # Same split: no sample moves, so the shares take effect at the agreement
        # step itself, not after the steps already handed out.
        assert (entry.effective_step, entry.shares) == (5, (0.5, 0.25))
        assert entry.share(0) == 0.5 and not entry.held


def test_a_new_split_with_shares_waits_for_the_steps_already_handed_out():
    agreement = SplitAgreement((32, 32), 64, world_size=2, exchanger=LocalExchanger())
    agreement.split_for_step(3)
    agreement.offer(SplitCommand(1, 0, (40, 24), (1.0, 0.5)))
    entry = agreement.sync(2)
    assert entry is not None and entry.effective_step == 4 and entry.split == (40, 24)


@pytest.mark.parametrize("shares", [(0.5,), (1.2, 0.5), (float("nan"), 1.0), (-0.1, 1.0)])
def test_bad_shares_are_rejected_not_raised(shares: Sequence[float]):
    agreement = SplitAgreement((32, 32), 64, world_size=2, exchanger=LocalExchanger())
    assert agreement.offer(SplitCommand(1, 0, (32, 32), tuple(shares))) is False
    assert agreement.stats().rejected == 1
    with pytest.raises(InvalidArgument, match="paced shares"):
        SplitAgreement((32, 32), 64, world_size=2, exchanger=LocalExchanger(), initial_shares=(2.0, 1.0))


class Source:
    """A CommandSource the test drives: offers commands on demand, may be 'lost'."""

    def __init__(self) -> None:
        self.offer = None
        self.is_lost = False

    def start(self, offer) -> None:  # type: ignore[no-untyped-def]
        self.offer = offer

    def stop(self) -> None:
        pass

    def lost(self) -> bool:
        return self.is_lost


def _loop(source: Source, shares: tuple[float, ...] = (0.0,), steps: int = 6) -> ElasticLoop:
    data = TensorDataset(torch.arange(steps * 4).float())
    return ElasticLoop(data, 4, rank=0, world_size=1, exchanger=LocalExchanger(), command_source=source,
                       initial_split=(4,), initial_version=1, initial_shares=shares, hold_poll_s=0.01)


def test_a_held_job_waits_before_its_first_step_and_starts_when_given_time():
    source = Source()
    loop = _loop(source)
    timer = threading.Timer(0.3, lambda: source.offer(SplitCommand(2, 0, (4,), (1.0,), "admitted")))
    timer.start()
    started = time.perf_counter()
    first = next(iter(loop.epoch(0)))
    waited = time.perf_counter() - started
    assert waited >= 0.25 and loop.held_s >= 0.25 and len(first[0]) == 4
    assert loop.agreement.entry_for_step(0).shares == (1.0,)  # resumed at the step it held at


def test_a_held_job_resumes_when_its_command_arrives_not_at_the_next_poll():
    """The ranks of a held job wake when a command reaches them; the poll interval
    (a minute here) only bounds how late they see another rank's command."""
    source = Source()
    data = TensorDataset(torch.arange(24).float())
    loop = ElasticLoop(data, 4, rank=0, world_size=1, exchanger=LocalExchanger(), command_source=source,
                       initial_split=(4,), initial_version=1, initial_shares=(0.0,), hold_poll_s=60.0)
    threading.Timer(0.2, lambda: source.offer(SplitCommand(2, 0, (4,), (), "admitted"))).start()
    first = next(iter(loop.epoch(0)))
    assert len(first[0]) == 4 and 0.15 <= loop.held_s < 30.0


def test_ranks_agree_about_every_every_s_at_the_pace_of_the_slowest():
    """With `every_s`, a rank proposes the steps that last that long at its pace;
    the agreement steps are the multiples of the smallest proposal on every rank
    (the first step agrees at once: no rank knows its pace yet)."""
    group = ThreadGroup(2)
    agreements = [SplitAgreement((32, 32), 64, world_size=2, exchanger=group.view(r), every=10, every_s=0.1)
                  for r in range(2)]
    agreements[0].note_step_s(0.01)  # 10 steps a tenth of a second
    agreements[1].note_step_s(0.04)  # 3
    agreed: list[list[int]] = [[], []]

    def rank(r: int) -> None:
        for step in range(10):
            before = agreements[r].stats().agreements
            agreements[r].launch(step)
            agreements[r].complete()
            if agreements[r].stats().agreements > before:
                agreed[r].append(step)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    [t.start() for t in threads]
    [t.join(10) for t in threads]
    assert agreed[0] == agreed[1] == [0, 3, 6, 9]
    agreements[1].note_step_s(10.0)  # a slow step: at most every step, never less
    assert agreements[1]._proposal == 1
    agreements[0].note_step_s(1e-6)  # a fast one: at most `every` steps apart
    assert agreements[0]._proposal == 10


def test_a_held_job_whose_control_plane_is_lost_trains_unpaced():
    source = Source()
    loop = _loop(source)
    threading.Timer(0.2, lambda: setattr(source, "is_lost", True)).start()
    batches = list(loop.epoch(0))
    assert len(batches) == 6 and loop.held_s >= 0.15
    assert not loop.agreement.entry_for_step(0).held and loop.agreement.entry_for_step(5).shares == ()


def test_a_paced_rank_is_held_for_the_rest_of_its_share_and_pacing_off_costs_nothing():
    source = Source()
    paced = _loop(source, shares=(0.25,))
    for _ in paced.epoch(0):
        time.sleep(0.02)  # the step's busy time
    # Each of the first five steps' 20 ms at share 1/4 is followed by ~60 ms held.
    assert 5 * 0.06 * 0.9 <= paced.paced_s <= 5 * 0.06 * 1.6
    plain = _loop(Source(), shares=())
    for _ in plain.epoch(0):
        time.sleep(0.02)
    assert plain.paced_s == 0 and plain.held_s == 0


def test_a_held_job_resumes_with_a_new_split_at_the_step_it_held_at():
    """The scheduler may move samples while it holds a job (planned with the shares it
    resumes with): no rank drew the held step's batch, so the new split applies there,
    on every rank, instead of at a step the held ranks never reach."""
    group = ThreadGroup(2)
    sources = [Source(), Source()]
    data = TensorDataset(torch.arange(40).float())
    loops = [ElasticLoop(data, 4, rank=r, world_size=2, exchanger=group.view(r), command_source=sources[r],
                         initial_split=(2, 2), initial_version=1, initial_shares=(0.0, 0.0), hold_poll_s=0.01)
             for r in range(2)]
    sizes: list[list[int]] = [[], []]

    def rank(r: int) -> None:
        for x, in loops[r].epoch(0):
            sizes[r].append(len(x))

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(2)]
    [t.start() for t in threads]
    time.sleep(0.2)  # both ranks hold before step 0
    for s in sources:
        s.offer(SplitCommand(2, 0, (3, 1), (), "resumed with samples moved"))
    [t.join(10) for t in threads]
    assert not any(t.is_alive() for t in threads), "a held job never resumed"
    assert sizes[0][0] == 3 and sizes[1][0] == 1 and len(sizes[0]) == len(sizes[1]) == 10
    assert all(loop.held_s >= 0.15 for loop in loops)


def test_a_rank_whose_gpu_busy_time_is_known_is_paced_on_that_not_its_whole_step():
    """A step of 20 ms whose GPU was busy 10 ms, at share 1/4: the GPU time allowed
    is 10 / (1/4) = 40 ms a step, so ~20 ms held; at share 1/2 nothing (its CPU part
    already leaves the GPU half idle)."""
    busy = [0.0]

    def step() -> None:
        time.sleep(0.01)
        busy[0] += 0.01  # the emulated GPU's busy clock advances 10 ms of the 20
        time.sleep(0.01)

    held = {}
    for share in (0.25, 0.5):
        data = TensorDataset(torch.arange(24).float())
        loop = ElasticLoop(data, 4, rank=0, world_size=1, exchanger=LocalExchanger(), command_source=Source(),
                           initial_split=(4,), initial_version=1, initial_shares=(share,), busy_clock=lambda: busy[0])
        for _ in loop.epoch(0):
            step()
        held[share] = loop.paced_s
    assert 5 * 0.02 * 0.5 <= held[0.25] <= 5 * 0.02 * 1.5
    assert held[0.5] == 0


def test_a_job_held_mid_training_resumes_where_it_holds_when_its_loader_ran_ahead():
    """Held at step 5 with steps up to 8 handed out (a prefetching loader): a command
    that resumes it with samples moved applies its shares at step 5 (the steps handed
    out keep their split) and its split at 9; before, the whole command waited for step
    9, which a job held at 5 never reaches."""
    agreement = SplitAgreement((2, 2), 4, world_size=2, exchanger=LocalExchanger())
    agreement.offer(SplitCommand(1, 0, (2, 2), (0.0, 0.0), "held"))
    agreement.sync(5)
    agreement.split_for_step(8)
    assert agreement.held_at(5)
    agreement.offer(SplitCommand(2, 0, (3, 1), (1.0, 0.5), "resumed with samples moved"))
    agreement.exchange_now(5)
    assert not agreement.held_at(5)
    assert [agreement.entry_for_step(s).split for s in (5, 8, 9)] == [(2, 2), (2, 2), (3, 1)]
    assert all(agreement.entry_for_step(s).shares == (1.0, 0.5) for s in (5, 8, 9))


def test_a_held_job_takes_a_command_for_a_later_step_where_it_holds():
    """A command may name a later step (a pinned split, a scheduler that did not
    know the hold was agreed); a held job would never reach it, so it takes the
    command where it holds (seen live: a long job held for good at 61 %)."""
    agreement = SplitAgreement((2, 2), 4, world_size=2, exchanger=LocalExchanger())
    agreement.offer(SplitCommand(1, 0, (2, 2), (0.0, 0.0), "held"))
    agreement.sync(5)
    assert agreement.held_at(5)
    agreement.offer(SplitCommand(3, 12, (3, 1), (), "runs with its GPUs to itself"))
    agreement.exchange_now(5)
    assert not agreement.held_at(5)
    assert agreement.entry_for_step(5).split == (3, 1) and agreement.entry_for_step(5).shares == ()


def test_a_paced_job_agrees_every_step_so_more_time_reaches_it_at_once():
    """Unpaced, ranks agree every `every` steps (5 here); paced, a step lasts
    1/share times longer, so every step is an agreement step and a command that
    gives it more time applies at the next one, not up to `every` long steps later."""
    agreement = SplitAgreement((4,), 4, world_size=1, exchanger=LocalExchanger(), every=5)
    for step in range(1, 11):
        agreement.launch(step)
        agreement.complete()
    assert agreement.stats().agreements == 2  # steps 5 and 10
    agreement.offer(SplitCommand(1, 0, (4,), (0.25,), "paced"))
    agreement.launch(15)
    agreement.complete()
    for step in range(16, 19):
        agreement.launch(step)
        agreement.complete()
    assert agreement.stats().agreements == 6  # 15, then every step: 16, 17, 18
    agreement.offer(SplitCommand(2, 0, (4,), (), "its GPU to itself"))
    agreement.launch(19)
    agreement.complete()
    assert agreement.entry_for_step(19).shares == ()  # applied at once, not at step 20
    agreement.launch(21)
    agreement.complete()
    assert agreement.stats().agreements == 7  # unpaced again: step 21 is no agreement step


def _handed_out(agreement: SplitAgreement, through: int) -> dict[int, tuple[int, ...]]:
    return {s: agreement.split_for_step(s) for s in range(through + 1)}


@pytest.mark.parametrize("second", [(1, 3), (2, 2)])
def test_a_later_command_never_revises_a_step_a_prefetching_loader_drew(second):
    """Paced, the ranks agree every step: a split scheduled at step 9 and drawn for
    steps 9-10 stands when a newer one (also one equal to the split before it)
    arrives at step 5; the newer one applies from step 11."""
    agreement = SplitAgreement((2, 2), 4, world_size=2, exchanger=LocalExchanger(), initial_shares=(0.5, 0.5))
    drawn = _handed_out(agreement, 8)
    agreement.offer(SplitCommand(1, 0, (3, 1), (0.5, 0.5)))
    agreement.sync(4)
    assert agreement.entry_for_step(9).split == (3, 1)
    drawn = _handed_out(agreement, 10)
    agreement.offer(SplitCommand(2, 0, second, (0.5, 0.5)))
    agreement.sync(5)
    assert _handed_out(agreement, 10) == drawn and drawn[9] == drawn[10] == (3, 1)
    assert agreement.split_for_step(11) == second


_command = st.builds(lambda v, a, b, sh: SplitCommand(v, a, (b, 8 - b), sh), st.integers(1, 30), st.integers(0, 20),
                     st.integers(1, 7), st.sampled_from([(), (0.5, 0.5), (0.0, 0.0), (1.0, 0.25)]))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.integers(0, 14), st.lists(_command, max_size=2), max_size=6), st.integers(1, 4),
       st.integers(0, 3))
def test_no_command_with_or_without_shares_revises_a_step_handed_out(offers, every, prefetch):
    agreement = SplitAgreement((4, 4), 8, world_size=2, exchanger=LocalExchanger(), every=every)
    first: dict[int, tuple[int, ...]] = {}
    for step in range(16):
        for command in offers.get(step, []):
            agreement.offer(command)
        agreement.launch(step)
        agreement.complete()
        for ahead in range(step, step + prefetch + 1):
            first.setdefault(ahead, agreement.split_for_step(ahead))
    assert {s: agreement.split_for_step(s) for s in first} == first
