"""Split agreement: every rank switches to a new per-rank split at the same step.

Split commands (version, apply_step, split) reach each rank's command thread
independently: at different times, only on some ranks, or after apply_step
has passed. Mechanism:

* `offer(command)` (any thread) validates the command and keeps it as this
  rank's pending command if its version is newer than anything known.
  Malformed commands are logged and counted, never raised.
* At the *agreement steps* all ranks exchange one tiny all-gather of
  (version, apply_step, answered_through, lost, split..., shares...,
  interval) rows: every `every` steps, or, given `every_s`, about every
  `every_s` seconds of training (at most `every` steps apart): each rank
  proposes the steps that last that long at its recent pace, and the
  agreement steps are the multiples of the smallest proposal, the same on
  every rank (a job of 0.2 s steps agrees every step, one of 5 ms steps
  every 10). The newest version known to *any* rank wins (ties: lowest
  rank), so a command that reached only rank 1 still applies everywhere.
* The winner takes effect at max(apply_step, agreement step, 1 + the highest
  step any rank had asked `split_for_step` about when it sent its row). Every
  rank computes the same step from the same rows, so they switch together; a
  late command applies at the agreement step (or the first step no rank had
  loaded yet), and a split already handed to a prefetching DataLoader is never
  revised.
* No command (control plane unreachable) means the split in force stays. A
  failed exchange (a peer died) freezes the split in force; nothing raises.

Commands may also carry *paced shares*, per rank the fraction of its GPU's
time it may use (`gpufair.scheduler.policy.paced`): the training loop holds
each rank for the rest of every step, and a share of 0 holds the job at a
step boundary until a command gives it time again. Shares travel with the
split in the same rows, so every rank paces and holds from the same step.
Shares move no samples, so they take effect at the agreement step itself, even
when the split they come with waits for steps already handed out (those keep
their splits under the new shares): a held job resumes at the step it holds at,
never at a later one it cannot reach. While held, the
ranks keep exchanging rows (`exchange_now`); if any of them has lost the
control plane for `lost_after_s`, the job is released and trains unpaced, as
it would without gpufair.

The exchange overlaps with compute: `launch(step)` starts the all-gather for
agreement step `step` (the training loop calls it right after fetching the
batch of step-1), and it completes at `complete()` or as soon as
`split_for_step` is asked about a step this rank had not answered at launch,
whichever comes first. Every rank has launched it by then, so waiting cannot
deadlock. A rank whose steps outlast `every_s` keeps its row back until the
step's body ends (`send_deferred`, which the loop calls first thing after
the body): a command that arrives during a long step then applies at the
next one. `sync(step)` is launch + complete. `offer` is the only method meant
for other threads; the rest belong to the training thread.

The all-gather goes through an `Exchanger`, so the logic is tested without
processes; `TorchExchanger` is the torch.distributed one (gloo, CPU tensors).
"""

from __future__ import annotations

import bisect
import logging
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.distributed as dist

from gpufair.client.sampler import check_split
from gpufair.common.errors import GpufairError, InvalidArgument

logger = logging.getLogger(__name__)

_NONE = -1  # version in a gathered row when the rank has nothing pending
_UNPACED = -1  # a share in a gathered row: the command paces no rank
_PPM = 1_000_000  # shares travel as parts per million in the int rows


@dataclass(frozen=True)
class SplitCommand:
    """Per-rank batch sizes `split`, version `version`, to apply at global step
    `apply_step`; `shares` per rank of its GPU's time (empty: unpaced, 0 holds);
    `reason` is what the scheduler said (logged, never exchanged)."""

    version: int
    apply_step: int
    split: tuple[int, ...]
    shares: tuple[float, ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class ScheduledSplit:
    """A split (and its paced shares) in force from global step `effective_step` on."""

    effective_step: int
    version: int
    split: tuple[int, ...]
    shares: tuple[float, ...] = ()

    def share(self, rank: int) -> float:
        """The fraction of its GPU's time `rank` may use (1 when unpaced)."""
        return self.shares[rank] if self.shares else 1.0

    @property
    def held(self) -> bool:
        """True when some rank has no time: the whole job waits (its ranks step together)."""
        return bool(self.shares) and min(self.shares) <= 0.0


@dataclass(frozen=True)
class AgreementStats:
    """Counters for telemetry: what was offered and what was agreed."""

    accepted: int  # offers kept as pending
    ignored: int  # offers not newer than a known version
    rejected: int  # malformed offers
    agreements: int  # collectives done
    version: int  # newest agreed version


#: Waits for a started all-gather and returns one row per rank, in rank order.
GatherResult = Callable[[], list[list[int]]]


def check_shares(shares: Sequence[float], world_size: int) -> tuple[float, ...]:
    """Validated paced shares: empty, or one per rank in [0, 1]."""
    out = tuple(float(x) for x in shares)
    if out and (len(out) != world_size or not all(0.0 <= x <= 1.0 for x in out)):
        raise InvalidArgument(f"paced shares must be {world_size} numbers in [0, 1], got {list(out)}")
    return out


class Exchanger(Protocol):
    """Starts an all-gather of one equal-length int row per rank."""

    def start_all_gather(self, row: Sequence[int]) -> GatherResult: ...


class LocalExchanger:
    """The exchanger of a one-rank job: nothing to exchange."""

    def start_all_gather(self, row: Sequence[int]) -> GatherResult:
        rows = [list(row)]
        return lambda: rows


class TorchExchanger:
    """Asynchronous all-gather over a gloo process group, on CPU int64 tensors.

    `create()` makes a dedicated gloo group so control traffic never queues
    behind (or interleaves with) DDP's gradient all-reduces, whatever the
    main backend; it is a collective: every rank must call it at the same point.

    The tensors are the exchanger's for its lifetime, reused by each
    exchange: gloo's worker thread drops its references to them a moment
    after `wait()` returns, and a thread that drops the last reference to a
    tensor Python made must take the GIL, which aborts the process
    ("terminate called without an active exception") once the interpreter
    is shutting down.
    """

    def __init__(self, group: dist.ProcessGroup | None, world_size: int) -> None:
        self._group = group
        self._world_size = world_size
        self._mine: torch.Tensor | None = None
        self._out: list[torch.Tensor] = []
        self._work: dist.Work | None = None

    @classmethod
    def create(cls) -> TorchExchanger:
        """An exchanger beside the initialised default process group."""
        return cls(dist.new_group(backend="gloo"), dist.get_world_size())

    def start_all_gather(self, row: Sequence[int]) -> GatherResult:
        if self._work is not None:
            self._work.wait()  # the buffers are about to be reused
        if self._mine is None or self._mine.numel() != len(row):
            self._mine = torch.empty(len(row), dtype=torch.int64)
            self._out = [torch.empty_like(self._mine) for _ in range(self._world_size)]
        self._mine.copy_(torch.tensor(list(row), dtype=torch.int64))
        work = self._work = dist.all_gather(self._out, self._mine, group=self._group, async_op=True)
        out = self._out

        def result() -> list[list[int]]:
            work.wait()
            return [t.tolist() for t in out]

        return result


@dataclass
class _InFlight:
    step: int
    answered: int  # this rank's answered_through when it sent its row
    result: GatherResult


class SplitAgreement:
    """Decides, identically on every rank, which split is in force at each step."""

    def __init__(
        self,
        initial_split: Sequence[int],
        global_batch_size: int,
        *,
        world_size: int,
        exchanger: Exchanger,
        every: int = 1,
        initial_version: int = 0,
        initial_shares: Sequence[float] = (),
        control_lost: Callable[[], bool] | None = None,
        every_s: float | None = None,
    ) -> None:
        if every < 1:
            raise InvalidArgument(f"agreement interval must be >= 1 step, got {every}")
        if every_s is not None and not every_s > 0:
            raise InvalidArgument(f"agreement interval must be > 0 s, got {every_s}")
        self.world_size = world_size
        self.global_batch_size = global_batch_size
        self.every, self.every_s = every, every_s
        # Steps to the next agreement this rank proposes: until it knows its pace, 1.
        self._proposal = every if every_s is None else 1
        self._step_s: float | None = None  # this rank's recent step time (moving average)
        self._k = self._proposal  # agreed: the agreement steps are its multiples
        self._news = threading.Event()  # set when `offer` keeps a command
        self._exchanger = exchanger
        first = ScheduledSplit(0, initial_version, check_split(initial_split, world_size, global_batch_size),
                               check_shares(initial_shares, world_size))
        self._schedule: list[ScheduledSplit] = [first]
        self._starts: list[int] = [0]
        self._agreed_version = initial_version
        self._pending: SplitCommand | None = None
        self._answered = -1  # highest step split_for_step has answered
        self._lock = threading.Lock()
        self._inflight: _InFlight | None = None
        self._deferred: int | None = None  # an agreement step whose row waits for `send_deferred`
        self._failed = False
        self._control_lost = control_lost or (lambda: False)
        self.reason = ""  # what the scheduler said with this rank's newest command (for logs)
        self._counts = {"accepted": 0, "ignored": 0, "rejected": 0, "agreements": 0}

    def offer(self, command: SplitCommand) -> bool:
        """Hand over a command from any thread; True if kept as pending. Never raises."""
        try:
            checked = self._validate(command)
        except GpufairError as exc:
            return self._count("rejected", False, "split command rejected: %s", exc)
        except Exception as exc:  # noqa: BLE001 - a command must never break training
            return self._count("rejected", False, "split command rejected: %r", exc)
        with self._lock:
            newest = max(self._agreed_version, self._pending.version if self._pending else _NONE)
            if checked.version <= newest:
                self._counts["ignored"] += 1
                logger.debug("split command version %d ignored (have %d)", checked.version, newest)
                return False
            self._pending = checked
            self.reason = command.reason
            self._counts["accepted"] += 1
        self._news.set()
        return True

    def wait_for_command(self, timeout: float) -> None:
        """Block until `offer` keeps a new command or `timeout` passes (a held job
        resumes as soon as its command arrives, not at the next poll)."""
        self._news.wait(timeout)
        self._news.clear()

    def note_step_s(self, seconds: float) -> None:
        """This rank's latest step took `seconds` (its hold and pacing sleep left
        out); with `every_s`, it sets the interval this rank proposes."""
        if self.every_s is None or not seconds > 0 or not math.isfinite(seconds):
            return
        self._step_s = seconds if self._step_s is None else 0.7 * self._step_s + 0.3 * seconds
        self._proposal = min(self.every, max(1, math.ceil(self.every_s / self._step_s)))

    def launch(self, step: int) -> None:
        """Start the exchange of agreement step `step` (no-op at other steps; a rank
        that sends late keeps its row for `send_deferred`). While paced, every
        step is an agreement step: a paced step is long (its rank holds for most
        of it), and a new command (more time, say) should not wait for the next
        agreement interval."""
        self.complete()  # the schedule read below is then the agreed one on every rank
        if step % self._k and not self._paced_at(step - 1):
            return
        if self._sends_late():
            self._deferred = step
            return
        self._launch(step)

    def _sends_late(self) -> bool:
        # A rank whose steps outlast the agreement interval sends its row when the
        # step's body ends (`send_deferred`), not when it starts: a command that
        # arrives during the body then applies at the next step rather than a
        # step later (a 250 ms step: a freed GPU idle 250 ms less), for one
        # all-gather no longer hidden behind compute, ~1 ms a step of >= every_s.
        # Per rank: only the timing differs, every rank exchanges at the same steps.
        return self.every_s is not None and self._step_s is not None and self._step_s >= self.every_s

    def send_deferred(self) -> None:
        """Send the row that `launch` kept back (this rank sends late), now that the
        step's body is done; no-op otherwise. `complete` sends it too."""
        step, self._deferred = self._deferred, None
        if step is not None:
            self._launch(step)

    def _paced_at(self, step: int) -> bool:
        # The same on every rank: the schedule is agreed.
        with self._lock:
            shares = self._in_force(step).shares
        return bool(shares) and min(shares) < 1.0

    def exchange_now(self, step: int) -> ScheduledSplit | None:
        """Exchange rows at `step` whatever the interval: the ranks of a held job,
        all waiting at the same step, call it together."""
        self._launch(step)
        return self.complete()

    def _launch(self, step: int) -> None:
        if self._failed:
            return
        self.complete()
        with self._lock:
            pending, answered = self._pending, self._answered
        try:
            lost = 1 if self._control_lost() else 0
        except Exception:  # noqa: BLE001 - a probe must never break training
            lost = 0
        if pending is not None and pending.version > self._agreed_version:
            shares = [round(x * _PPM) for x in pending.shares] or [_UNPACED] * self.world_size
            row = [pending.version, pending.apply_step, answered, lost, *pending.split, *shares, self._proposal]
        else:
            row = [_NONE, 0, answered, lost, *([0] * self.world_size), *([_UNPACED] * self.world_size), self._proposal]
        try:
            self._inflight = _InFlight(step, answered, self._exchanger.start_all_gather(row))
        except Exception:  # noqa: BLE001 - never into the training loop
            self._fail()

    def complete(self) -> ScheduledSplit | None:
        """Finish the exchange in flight (sending a deferred row first), if any;
        returns the split it scheduled."""
        self.send_deferred()
        inflight, self._inflight = self._inflight, None
        if inflight is None:
            return None
        try:
            rows = inflight.result()
        except Exception:  # noqa: BLE001 - never into the training loop
            self._fail()
            return None
        with self._lock:
            self._counts["agreements"] += 1
            self._k = max(1, min(r[-1] for r in rows))  # the smallest proposal, on every rank
            return self._decide(inflight.step, rows)

    def sync(self, step: int) -> ScheduledSplit | None:
        """Launch and complete the exchange of `step` (blocking form)."""
        self.launch(step)
        return self.complete()

    def held_at(self, step: int) -> bool:
        """Whether the job is held at `step`, without handing the step out: a
        held job's next batch is not drawn, so a new split may still apply to it."""
        with self._lock:
            return self._in_force(step).held

    def split_for_step(self, step: int) -> tuple[int, ...]:
        """The split in force at global `step`; once answered it never changes."""
        return self.entry_for_step(step).split

    def entry_for_step(self, step: int) -> ScheduledSplit:
        """The schedule entry (version, split) in force at global `step`."""
        inflight = self._inflight
        if (inflight is not None and step > inflight.answered) or (self._deferred is not None and step > self._answered):
            self.complete()  # its outcome may apply from this step on
        with self._lock:
            if step > self._answered:
                self._answered = step
            index = bisect.bisect_right(self._starts, step) - 1
            return self._schedule[max(index, 0)]

    @property
    def failed(self) -> bool:
        """True once an exchange failed: the split (and shares) in force stay."""
        return self._failed

    @property
    def schedule(self) -> tuple[ScheduledSplit, ...]:
        with self._lock:
            return tuple(self._schedule)

    def stats(self) -> AgreementStats:
        """A snapshot of the counters."""
        with self._lock:
            return AgreementStats(version=self._agreed_version, **self._counts)

    def _validate(self, command: SplitCommand) -> SplitCommand:
        version, apply_step = command.version, command.apply_step
        if not isinstance(version, int) or version < 0:
            raise InvalidArgument(f"version must be an integer >= 0, got {version!r}")
        if not isinstance(apply_step, int) or apply_step < 0:
            raise InvalidArgument(f"apply_step must be an integer >= 0, got {apply_step!r}")
        split = check_split(command.split, self.world_size, self.global_batch_size)
        return SplitCommand(version, apply_step, split, check_shares(command.shares, self.world_size))

    def _in_force(self, step: int) -> ScheduledSplit:
        return self._schedule[max(bisect.bisect_right(self._starts, step) - 1, 0)]

    def _decide(self, step: int, rows: list[list[int]]) -> ScheduledSplit | None:
        # Runs identically on every rank over identical rows: no rank-local input.
        n = self.world_size
        best = max(range(len(rows)), key=lambda r: (rows[r][0], -r))
        version, apply_step = rows[best][0], rows[best][1]
        if version <= self._agreed_version:
            return self._release(step, rows)
        try:
            split = check_split(rows[best][4:4 + n], n, self.global_batch_size)
            shares = () if rows[best][4 + n] == _UNPACED else \
                check_shares([x / _PPM for x in rows[best][4 + n:4 + 2 * n]], n)
        except InvalidArgument as exc:
            self._counts["rejected"] += 1
            logger.warning("agreed split command rejected: %s", exc)
            return None
        answered = max(r[2] for r in rows)
        # A job held at `step` never reaches a later apply step: it takes the command
        # where it stands (the scheduler may not know the hold was agreed yet).
        effective = step if self._in_force(step).held else max(apply_step, step)
        keep = bisect.bisect_left(self._starts, effective)
        # The entries in force from `effective` through the last step any rank handed out.
        handed_out = [self._in_force(effective)] + [e for e in self._schedule[keep:] if e.effective_step <= answered]
        split_at = effective
        if any(e.split != split for e in handed_out):
            split_at = max(effective, answered + 1)  # never revise a split handed out
            if self._answered >= split_at:
                # Only if split_for_step runs on another thread during sync (unsupported).
                logger.error("step %d was handed out during an agreement; ranks may disagree", split_at)
        # New shares apply at the step the ranks stand at, even when the new split
        # must wait for steps already handed out: a rank re-reads its share before
        # each step, and a held job (which draws no batch while held) would never
        # reach a later step. Steps handed out keep their splits under the new
        # shares; a newer command supersedes older ones not yet in force.
        if split_at > effective and all(old.shares == shares for old in handed_out):
            keep = bisect.bisect_left(self._starts, split_at)  # the steps handed out stand as they are
            del self._schedule[keep:], self._starts[keep:]
        else:
            del self._schedule[keep:], self._starts[keep:]
            for old in handed_out if split_at > effective else ():
                self._append(ScheduledSplit(max(old.effective_step, effective), old.version, old.split, shares))
        entry = ScheduledSplit(split_at, version, split, shares)
        self._append(entry)
        self._agreed_version = version
        if self._pending is not None and self._pending.version <= version:
            self._pending = None
        paced = f" paced {[round(x, 3) for x in shares]}" if shares else ""
        logger.info("split version %d %s%s scheduled at step %d", version, split, paced, split_at)
        return entry

    def _release(self, step: int, rows: list[list[int]]) -> ScheduledSplit | None:
        """A held job whose control plane some rank has lost trains unpaced."""
        current = self._in_force(step)
        if not current.held or not any(r[3] for r in rows):
            return None
        keep = bisect.bisect_left(self._starts, step)
        later = self._schedule[keep:]
        del self._schedule[keep:], self._starts[keep:]
        entry = ScheduledSplit(step, current.version, current.split, ())
        self._append(entry)
        for e in later:  # their splits stand (some may be handed out), unpaced
            self._append(ScheduledSplit(e.effective_step, e.version, e.split, ()))
        logger.warning("control plane lost while the scheduler held the job; training unpaced from step %d", step)
        return entry

    def _append(self, entry: ScheduledSplit) -> None:
        """Schedule `entry` after the last one; a start already taken keeps its entry."""
        if not self._starts or self._starts[-1] < entry.effective_step:
            self._schedule.append(entry)
            self._starts.append(entry.effective_step)

    def _fail(self) -> None:
        self._failed = True
        logger.exception("split agreement failed; keeping the split in force from now on")

    def _count(self, name: str, result: bool, message: str, *args: object) -> bool:
        with self._lock:
            self._counts[name] += 1
        logger.warning(message, *args)
        return result
