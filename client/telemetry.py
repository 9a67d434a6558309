"""Per-step telemetry to the metrics service, from a background thread.

The training thread only appends to a bounded deque (O(1), no locks held
across I/O). A sender thread batches what is queued onto one bidirectional
stream. When the service is down the deque keeps the newest records, drops
the oldest and counts them; the sender reconnects with backoff. Counters are
cumulative, so dropped records lose no progress.
"""

from __future__ import annotations

import collections
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator

import grpc

from gpufair.api.metrics.v1 import metrics_service_pb2 as pb
from gpufair.api.metrics.v1 import metrics_service_pb2_grpc as pb_grpc
from gpufair.client.backoff import Backoff
from gpufair.client.training import StepRecord

logger = logging.getLogger(__name__)

DeviceProbe = Callable[[], pb.DeviceReading | None]


class TelemetryReporter:
    """A `StepObserver` that streams records of one rank; `close()` flushes briefly and stops."""

    def __init__(self, channel: grpc.Channel, *, job_id: str, rank: int, node: str, device_id: str, global_batch: int,
                 total_samples: int, metadata: tuple[tuple[str, str], ...] = (), max_queue: int = 4096,
                 max_batch: int = 256, flush_s: float = 0.2, device_probe: DeviceProbe | None = None,
                 busy_clock: Callable[[], float] | None = None) -> None:
        self._stub = pb_grpc.MetricsServiceStub(channel)
        # A random incarnation tells the service a restarted process apart from a replay.
        self._header = dict(job_id=job_id, rank=rank, node=node, device_id=device_id, global_batch=global_batch, total_samples=total_samples,
                            incarnation=secrets.randbits(63) + 1)
        self._metadata = metadata
        self._queue: collections.deque[pb.StepRecord] = collections.deque(maxlen=max_queue)
        self._max_batch, self._flush_s = max_batch, flush_s
        self._probe, self._busy_clock = device_probe, busy_clock
        self._last_busy = busy_clock() if busy_clock else 0.0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._dropped_queue = 0  # written by the training thread only
        self._dropped_inflight = 0  # written by the sender thread only
        self.sent = 0
        self.rejected = 0
        self._seq = 0
        self._thread = threading.Thread(target=self._run, name=f"gpufair-telemetry-{rank}", daemon=True)
        self._thread.start()

    # --- training thread -----------------------------------------------------

    def on_step(self, record: StepRecord) -> None:
        compute = record.compute_s
        if self._busy_clock is not None:
            # On an emulated device, the time it was held is the GPU-busy time;
            # the rest of the loop body was waiting for it.
            busy = self._busy_clock()
            compute, self._last_busy = busy - self._last_busy, busy
        if len(self._queue) == self._queue.maxlen:
            self._dropped_queue += 1
        self._queue.append(pb.StepRecord(step=record.global_step, local_batch=record.local_batch_size, compute_s=max(compute, 0.0),
                                         data_wait_s=record.data_wait_s, samples_total=record.local_samples_total,
                                         steps_total=record.steps_total, unix_time_s=time.time()))
        if len(self._queue) >= self._max_batch:
            self._wake.set()

    # --- sender thread -------------------------------------------------------

    def _batches(self) -> Iterator[pb.ReportTelemetryRequest]:
        while not self._stop.is_set() or self._queue:
            self._wake.wait(self._flush_s)
            self._wake.clear()
            records = []
            while self._queue and len(records) < self._max_batch:
                records.append(self._queue.popleft())
            if not records:
                if self._stop.is_set():
                    return
                continue
            if self._probe is not None:
                reading = self._probe()
                if reading is not None:
                    records[-1].device.CopyFrom(reading)
            self._seq += 1
            self._inflight = records
            yield pb.ReportTelemetryRequest(records=records, dropped_total=self.dropped, batch_seq=self._seq, **self._header)

    def _run(self) -> None:
        backoff = Backoff(self._stop)
        while not (self._stop.is_set() and not self._queue):
            self._inflight: list[pb.StepRecord] = []
            try:
                for ack in self._stub.ReportTelemetry(self._batches(), metadata=self._metadata):
                    self.sent += ack.accepted
                    self.rejected += ack.rejected
                    if ack.error:
                        logger.warning("metrics service rejected %d records: %s", ack.rejected, ack.error)
                    backoff.reset()
                return
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                    logger.error("telemetry refused (%s); not retrying", code.name)
                    return
                self._dropped_inflight += len(self._inflight)  # the batch in flight may be lost
                logger.debug("telemetry stream broke (%s); reconnecting", code)
            except Exception:  # noqa: BLE001 - the sender must never die silently
                logger.exception("telemetry sender failed; reconnecting")
            if not backoff.wait():
                return

    @property
    def dropped(self) -> int:
        """Records lost so far: pushed out of the full queue, or in flight when a stream broke."""
        return self._dropped_queue + self._dropped_inflight

    def close(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)


