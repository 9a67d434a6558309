"""Emulated shared GPUs: N virtual devices, time-sliced between real processes.

A process holds a device while it computes (`with dev.compute(): ...`), as a
GPU's time-slicing does, so contention comes from processes really waiting for
each other. Cross-process, crash-safe and fair, using only files and flock in
a shared directory (GPUFAIR_EMU_DIR):

- a waiter takes a ticket under the device's `meta` lock and publishes a queue
  file `q/<ticket>` that it holds LOCK_EX on from birth (created under a temp
  name and renamed in, so no one ever sees it unlocked);
- it then blocks (LOCK_SH) on its nearest live predecessor's file; the kernel
  wakes it when that predecessor releases *or dies*, and it re-checks until no
  smaller ticket is left. FIFO by ticket, so no waiter starves (a plain flock
  lets the releasing process win again and again).

A slower device (speed < 1, relative to the fastest) keeps the slice for
t*(1/speed - 1) after t seconds of compute. Busy seconds and slices are
accounted per device under the meta lock for telemetry.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpufair.common import env
from gpufair.common.errors import FailedPrecondition, InvalidArgument, Unavailable

logger = logging.getLogger(__name__)

ENV_GPUS = env.EMU_GPUS.name
#: A wait for a device this long is worth a warning: the usual cause is a rank
#: holding it across a collective that waits for a rank queued behind another's hold.
STUCK_WAIT_S = 60.0
_MAX_DEVICES = 1024
_TICKET = "{:020d}"
_STATE_BYTES = 256


def parse_gpus(spec: str) -> tuple[float, ...]:
    """Parse a device spec: "4" (four equal devices) or "1.0,1.0,0.5" (speeds).

    Speeds are relative; they are normalised so the fastest device is 1.0.
    """
    text = spec.strip()
    try:
        speeds = (1.0,) * int(text) if text.isdigit() else tuple(float(s) for s in text.split(","))
    except ValueError:
        raise InvalidArgument(f"{ENV_GPUS}={spec!r}: want a count like '4' or speeds like '1,1,0.5'") from None
    if not 1 <= len(speeds) <= _MAX_DEVICES:
        raise InvalidArgument(f"{ENV_GPUS}={spec!r}: want between 1 and {_MAX_DEVICES} devices")
    if not all(0.0 < s < float("inf") for s in speeds):
        raise InvalidArgument(f"{ENV_GPUS}={spec!r}: every speed must be a positive number")
    fastest = max(speeds)
    return tuple(s / fastest for s in speeds)


def host_segment(host: str | None = None) -> str:
    """This host's name, made safe for device ids and etcd key segments."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", host or socket.gethostname()).strip("-._")
    return name or "localhost"


@dataclass(frozen=True)
class EmuConfig:
    """Where the emulated devices live and how fast each one is."""

    dir: Path
    speeds: tuple[float, ...] = (1.0,)
    host: str = "localhost"

    @classmethod
    def from_env(cls, e: Mapping[str, str] | None = None) -> EmuConfig:
        """Read GPUFAIR_EMU_GPUS (default "1") and GPUFAIR_EMU_DIR (default /dev/shm/gpufair-emu-<uid>)."""
        return cls(dir=Path(env.EMU_DIR.read(e)), speeds=parse_gpus(env.EMU_GPUS.read(e)), host=host_segment())

    def device_id(self, index: int) -> str:
        """The stable id reported in place of a GPU UUID."""
        return f"emu-{self.host}-{index}"

    def check_index(self, index: int) -> int:
        if not 0 <= index < len(self.speeds):
            raise InvalidArgument(f"emulated device {index} does not exist; there are {len(self.speeds)}")
        return index


@dataclass(frozen=True)
class DeviceUsage:
    """Cumulative accounting of one emulated device (busy time is counted at release)."""

    device_id: str
    index: int
    speed: float
    busy_s: float
    slices: int
    occupants: tuple[int, ...]  # pids that have the device open
    queued: int  # processes holding or waiting for it


@contextlib.contextmanager
def _flocked_state(fd: int) -> Iterator[dict]:
    """Read-modify-write a device's JSON state (open as `fd`) under its exclusive lock."""
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        raw = os.pread(fd, _STATE_BYTES, 0)
        try:
            state = json.loads(raw) if raw.strip() else {}
        except ValueError:
            state = {}  # a torn write from a killed process: start the stats again
        before = dict(state)
        yield state
        if state != before:
            # Overwrite in place, padded: truncating makes ext4 flush (milliseconds a slice).
            os.pwrite(fd, json.dumps(state).encode().ljust(_STATE_BYTES), 0)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _is_dead(path: Path) -> bool:
    """True when no process holds `path` locked (its owner released or died)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


class EmulatedDevice:
    """One emulated GPU opened by this process. Use from one thread."""

    def __init__(self, config: EmuConfig, index: int) -> None:
        self.config = config
        self.index = config.check_index(index)
        self.device_id = config.device_id(index)
        self.speed = config.speeds[index]
        self._root = config.dir / f"dev-{index}"
        self._queue = self._root / "q"
        self._users = self._root / "users"
        self._meta_fd = -1
        self._held_fd: int | None = None
        self._held_path = self._queue
        self._granted_at = 0.0
        self._user_fd: int | None = None
        self._user_path = self._users
        self._waiting_since: float | None = None  # read by the watchdog: the step loop only sets it
        self._closed = threading.Event()
        self._watchdog: threading.Thread | None = None

    @classmethod
    def open(cls, index: int, config: EmuConfig | None = None) -> EmulatedDevice:
        """Open device `index` (config from the environment by default) and join its occupants."""
        dev = cls(config or EmuConfig.from_env(), index)
        try:
            dev._queue.mkdir(parents=True, exist_ok=True)
            dev._users.mkdir(parents=True, exist_ok=True)
            dev._meta_fd = os.open(dev._root / "meta", os.O_RDWR | os.O_CREAT, 0o666)
            dev._user_path = dev._users / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
            dev._user_fd = os.open(dev._user_path, os.O_RDWR | os.O_CREAT, 0o666)
            fcntl.flock(dev._user_fd, fcntl.LOCK_EX)
        except OSError as e:
            raise Unavailable(f"cannot open emulated device dir {dev._root}: {e.strerror}") from None
        return dev

    def close(self) -> None:
        """Leave the device (a held slice is released first)."""
        self._closed.set()
        self.release()
        if self._user_fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._user_path)
            os.close(self._user_fd)
            self._user_fd = None
        if self._meta_fd >= 0:
            os.close(self._meta_fd)
            self._meta_fd = -1

    def __enter__(self) -> EmulatedDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def compute(self, timeout: float | None = None) -> Iterator[None]:
        """Hold the device for the block; a slower device keeps it proportionally longer."""
        self.acquire(timeout)
        try:
            yield
        finally:
            self.release()

    def acquire(self, timeout: float | None = None) -> None:
        """Wait for this process's turn (FIFO); Unavailable after `timeout` seconds."""
        if self._held_fd is not None:
            raise FailedPrecondition(f"{self.device_id} is already held by this process")
        if self._meta_fd < 0:
            raise FailedPrecondition(f"{self.device_id} is closed; open it again")
        tmp = self._queue / f".tmp-{os.getpid()}-{uuid.uuid4().hex}"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.flock(fd, fcntl.LOCK_EX)  # locked before anyone can see it under a ticket name
        self._held_fd, self._held_path = fd, tmp
        try:
            with _flocked_state(self._meta_fd) as state:
                # Never behind a ticket still queued, even if the state file was lost.
                ticket = max(int(state.get("next", 0)), self._last_ticket() + 1)
                state["next"] = ticket + 1
                final = self._queue / _TICKET.format(ticket)
                os.rename(tmp, final)
                self._held_path = final
            if self._watchdog is None:
                self._watchdog = threading.Thread(target=self._watch, name=f"{self.device_id}-watchdog", daemon=True)
                self._watchdog.start()
            self._waiting_since = time.monotonic()
            try:
                self._wait_turn(ticket, None if timeout is None else time.monotonic() + timeout)
            finally:
                self._waiting_since = None
            self._granted_at = time.perf_counter()
        except BaseException:
            self._drop_ticket()
            raise

    def _watch(self) -> None:
        """Warn once per wait for the device that lasts `STUCK_WAIT_S` (a thread per
        open device, so a step's acquire costs a timestamp, not a timer)."""
        warned = None
        while not self._closed.wait(STUCK_WAIT_S / 4):
            since = self._waiting_since
            if since is not None and since != warned and time.monotonic() - since >= STUCK_WAIT_S:
                warned = since
                self._warn_stuck()

    def _warn_stuck(self) -> None:
        logger.warning("waited %.0f s for emulated GPU %s: if a rank runs a collective (DDP's backward "
                       "all-reduce, a barrier) while holding an emulated GPU, jobs sharing GPUs wait for each "
                       "other for ever; hold it (session.compute()) for local compute only", STUCK_WAIT_S,
                       self.device_id)

    def _last_ticket(self) -> int:
        return max((int(n) for n in os.listdir(self._queue) if n.isdigit()), default=-1)

    def _drop_ticket(self) -> None:
        # Unlink before unlock: a successor that still finds the file knows its owner died.
        if self._held_fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self._held_path)
        os.close(self._held_fd)
        self._held_fd = None

    def _wait_turn(self, ticket: int, deadline: float | None) -> None:
        while True:
            ahead = [int(n) for n in os.listdir(self._queue) if n.isdigit() and int(n) < ticket]
            if not ahead:
                return
            path = self._queue / _TICKET.format(max(ahead))
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # it released between listdir and open
            try:
                self._lock_shared(fd, deadline)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)  # still there once unlocked: its owner died holding it
            finally:
                os.close(fd)

    def _lock_shared(self, fd: int, deadline: float | None) -> None:
        if deadline is None:
            fcntl.flock(fd, fcntl.LOCK_SH)
            return
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise Unavailable(f"{self.device_id} still busy after the timeout") from None
                time.sleep(0.001)

    def release(self) -> None:
        """Give the device back (pairs with `acquire`); prefer `compute()`."""
        if self._held_fd is None:
            return
        computed_s = time.perf_counter() - self._granted_at
        if self.speed < 1.0 and computed_s > 0:
            time.sleep(computed_s * (1.0 / self.speed - 1.0))
            computed_s /= self.speed
        with _flocked_state(self._meta_fd) as state:
            state["busy_s"] = float(state.get("busy_s", 0.0)) + computed_s
            state["slices"] = int(state.get("slices", 0)) + 1
        self._drop_ticket()

    def usage(self) -> DeviceUsage:
        """This device's accounting, as telemetry reports it."""
        return device_usage(self.config, self.index)


def device_usage(config: EmuConfig, index: int) -> DeviceUsage:
    """Accounting of emulated device `index`; an unused device reads as idle."""
    root = config.dir / f"dev-{config.check_index(index)}"
    state: dict = {}
    with contextlib.suppress(FileNotFoundError):
        fd = os.open(root / "meta", os.O_RDWR)
        try:
            with _flocked_state(fd) as state:
                pass
        finally:
            os.close(fd)
    users = sorted(p for p in (root / "users").glob("*") if not _is_dead(p)) if root.exists() else []
    queued = [p for p in (root / "q").glob("[0-9]*") if not _is_dead(p)] if root.exists() else []
    return DeviceUsage(
        device_id=config.device_id(index),
        index=index,
        speed=config.speeds[index],
        busy_s=float(state.get("busy_s", 0.0)),
        slices=int(state.get("slices", 0)),
        occupants=tuple(int(p.name.split("-")[0]) for p in users),
        queued=len(queued),
    )
