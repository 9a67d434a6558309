"""The emulated device probe: utilisation over at least a window, so a reading
taken between kernels (busy time is counted as each one ends) is not 0."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import gpufair.client.devices as devices


class FakeDevice:
    def __init__(self) -> None:
        self.busy = 0.0

    def usage(self) -> SimpleNamespace:
        return SimpleNamespace(busy_s=self.busy)


def test_a_reading_between_kernels_covers_the_last_window_not_just_the_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(devices.time, "monotonic", lambda: clock[0])
    dev = FakeDevice()
    probe = devices.EmulatedProbe(dev, window_s=1.0)
    clock[0], dev.busy = 100.8, 0.6  # kernels ended in the first 0.8 s
    assert probe().utilization_percent == pytest.approx(75.0)
    clock[0] = 101.0  # 0.2 s later, no kernel ended: the reading still spans a second
    assert probe().utilization_percent == pytest.approx(60.0)
    clock[0] = 102.5  # the old samples age out: 1.5 s idle since the last one at least a window old
    assert probe().utilization_percent == pytest.approx(0.0)
    clock[0], dev.busy = 103.0, 1.1  # half a second of kernels, over the 2 s since 101.0 (the newest
    assert probe().utilization_percent == pytest.approx(25.0)  # sample at least a window old)
