"""A device's occupants are the ranks reporting now: an ended job leaves its GPU's list
within the window, though its figures stay known until they expire."""

from __future__ import annotations

from gpufair.metrics.core import Record
from gpufair.metrics.store import MetricsStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _steps(first: int, n: int, t0: float) -> list[Record]:
    return [Record(step=s, local_batch=8, compute_s=0.05, data_wait_s=0.0, samples_total=(s + 1) * 8, steps_total=s + 1,
                   t=t0 + 0.1 * (s - first + 1)) for s in range(first, first + n)]


def test_an_ended_jobs_rank_leaves_its_device_but_not_the_store():
    clock = Clock()
    store = MetricsStore(window_s=30.0, expire_s=300.0, clock=clock)
    store.ingest("ended", 0, "n1", "gpu-0", 8, 800, 0, _steps(0, 10, clock.now))
    store.ingest("live", 0, "n1", "gpu-0", 8, 800, 0, _steps(0, 10, clock.now))
    assert [o.job for o in store.devices()[0].occupants] == ["ended", "live"]
    clock.now += 31.0  # "ended" stopped reporting; "live" goes on
    store.ingest("live", 0, "n1", "gpu-0", 8, 800, 0, _steps(10, 10, clock.now))
    (device,) = store.devices()
    assert [o.job for o in device.occupants] == ["live"]
    assert store.job("ended").samples_done == 80  # still known (gpufair job, the scheduler's estimates)
    clock.now += 40.0  # nobody reports: the device is listed, idle
    (device,) = store.devices()
    assert device.occupants == () and device.utilization_percent == 0.0
