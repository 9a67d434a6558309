"""Follows a job's split commands from the scheduler on a background thread.

Each rank opens its own stream (so the scheduler sees it as a live member) and
hands every command to the split agreement, which makes all ranks switch at
the same step. The scheduler unreachable means no new commands: the split in
force stays, and the thread reconnects with backoff.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import grpc

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from gpufair.client.backoff import Backoff
from gpufair.client.splits import SplitCommand

logger = logging.getLogger(__name__)


class GrpcCommandSource:
    """A `CommandSource` over `SchedulerService.StreamCommands`."""

    def __init__(self, channel: grpc.Channel, *, job_id: str, rank: int, metadata: tuple[tuple[str, str], ...] = (),
                 on_command: Callable[[SplitCommand, float], None] | None = None, lost_after_s: float = 30.0) -> None:
        self._stub = pb_grpc.SchedulerServiceStub(channel)
        self._job, self._rank, self._metadata = job_id, rank, metadata
        self._on_command = on_command
        self._stop = threading.Event()
        self._call: grpc.Future | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._offers: list[Callable[[SplitCommand], bool]] = []
        self._latest: SplitCommand | None = None
        self.known_version = 0
        self.received = 0
        self._lost_after_s = lost_after_s
        self._down_since: float | None = None  # monotonic time the stream last broke (None: up)

    def start(self, offer: Callable[[SplitCommand], bool]) -> None:
        """Deliver commands to `offer` too. One stream serves every loop of the session
        (say, a training and a validation loop): each gets every command."""
        with self._lock:
            self._offers.append(offer)
            latest = self._latest
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"gpufair-commands-{self._rank}", daemon=True)
                self._thread.start()
        if latest is not None:
            offer(latest)  # a loop created later starts from the split in force

    def _offer(self, command: SplitCommand) -> None:
        with self._lock:
            self._latest = command
            offers = list(self._offers)
        for offer in offers:
            offer(command)

    def lost(self) -> bool:
        """True when the stream has been down for `lost_after_s` (a held job then
        trains unpaced, as without gpufair)."""
        down = self._down_since
        return down is not None and time.monotonic() - down >= self._lost_after_s

    def stop(self) -> None:
        self._stop.set()
        call = self._call
        if call is not None:
            call.cancel()
        if self._thread:
            self._thread.join(2.0)

    def _run(self) -> None:
        backoff = Backoff(self._stop)
        while not self._stop.is_set():
            try:
                req = pb.StreamCommandsRequest(job_id=self._job, rank=self._rank, known_version=self.known_version)
                self._call = self._stub.StreamCommands(req, metadata=self._metadata)
                for msg in self._call:
                    backoff.reset()
                    self._down_since = None
                    c = msg.command
                    if c.version <= self.known_version:
                        continue
                    self.known_version = c.version
                    self.received += 1
                    command = SplitCommand(c.version, c.apply_step, tuple(c.batch_sizes), tuple(c.shares), c.reason)
                    self._offer(command)
                    if self._on_command:
                        self._on_command(command, time.time())
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                if self._stop.is_set() or code == grpc.StatusCode.CANCELLED:
                    return
                if code == grpc.StatusCode.FAILED_PRECONDITION:
                    # The job has ended (closed by rank 0, or removed by an operator): nothing more will come.
                    logger.info("no more split commands for job %s: %s", self._job, exc.details())
                    return
                if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.NOT_FOUND):
                    logger.error("command stream refused (%s: %s); keeping the current split", code.name, exc.details())
                    if not backoff.wait():
                        return
                    continue
                logger.debug("command stream broke (%s); reconnecting", code)
            except Exception:  # noqa: BLE001 - never let the follower die silently
                logger.exception("command follower failed; reconnecting")
            if self._down_since is None:
                self._down_since = time.monotonic()
            if not backoff.wait():
                return
