"""What `gpufair submit` shows of torchrun's stderr (pure: fed line by line).

The trainers' own output, their tracebacks included, passes through as it
comes. torchrun's report of its own end does not: on a failed rank it raises
ChildFailedError (a 20-line traceback of torchrun's internals, then a
summary block), on Ctrl-C or SIGTERM a SignalException traceback. The
filter drops those and keeps what they say: the first failed rank's exit
code (torchrun itself always exits 1), so that submit can exit with it.
"""

from __future__ import annotations

import re

_EXITCODE = re.compile(r"exitcode\s*:\s*(-?\d+)")
_RANK = re.compile(r"local_rank:\s*(\d+)")
_OWN_ERRORS = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError",
               "torch.distributed.elastic.multiprocessing.api.SignalException")
_RULE = "=" * 20


class TorchrunStderr:
    """Feed it torchrun's stderr lines; `feed` returns the lines to show."""

    def __init__(self) -> None:
        self.exit_code: int | None = None  # the first failed rank's, as torchrun reported it
        self.failed_rank: int | None = None
        self.signalled = False  # torchrun was stopped by a signal
        self._traceback: list[str] = []  # a traceback whose owner is not known yet
        self._summary = 0  # inside ChildFailedError's summary: the rules seen so far

    def feed(self, line: str) -> list[str]:
        if self._summary:
            self._note(line)
            if line.startswith(_RULE):
                self._summary += 1
                if self._summary > 2:  # the closing rule
                    self._summary = 0
            return []
        if self._traceback:
            self._traceback.append(line)
            if line[:1] in (" ", "\t", "") or line.startswith("Traceback"):
                return []  # frames (or a chained traceback) until the exception's own line
            block, self._traceback = self._traceback, []
            if line.startswith(_OWN_ERRORS):
                if "SignalException" in line:
                    self.signalled = True
                else:
                    self._summary = 1  # its summary follows, between two rules
                return []
            return block
        if line.startswith("Traceback (most recent call last):"):
            self._traceback = [line]
            return []
        if " failed (exitcode: " in line and "torch/distributed/elastic" in line:
            self._note(line)  # the same news as the summary; one line of our own says it
            return []
        return [line]

    def close(self) -> list[str]:
        """The lines still held when the stream ends (a traceback cut short)."""
        block, self._traceback = self._traceback, []
        return block

    def _note(self, line: str) -> None:
        if self.exit_code is None and (m := _EXITCODE.search(line)):
            self.exit_code = int(m.group(1))
            if r := _RANK.search(line):
                self.failed_rank = int(r.group(1))


def exit_status(torchrun_code: int, seen: TorchrunStderr) -> int:
    """submit's exit code: the failed rank's (128 + N for a rank killed by signal N)
    where torchrun reported one, else torchrun's own."""
    if torchrun_code == 0 or not seen.exit_code:
        return torchrun_code
    return seen.exit_code if seen.exit_code > 0 else 128 - seen.exit_code
