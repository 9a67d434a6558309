"""A profile's multi-device measurements give the step's sync cost at that
scale, for live jobs as Gavel's N-GPU throughputs give it to the simulator."""

from __future__ import annotations

import pytest

from gpufair.common.steptime import Scaling, StepTimeModel


def test_measured_devices_add_their_sync_and_splits_change_only_the_per_sample_part():
    # One device: 0.02 + 0.001 b. Two devices: every step 0.03 s slower at both batches.
    points = [(1, 32, 0.052), (1, 64, 0.084), (2, 32, 0.082), (2, 64, 0.114)]
    fit = StepTimeModel(0.02, 0.001, Scaling.from_points(0.02, 0.001, points))
    assert fit.step_s(64, devices=2) == pytest.approx(0.114)
    assert fit.step_s(16, devices=2) - fit.step_s(16) == pytest.approx(0.03)
    assert fit.costs(2) == pytest.approx((0.05, 0.001))
    # Unmeasured counts: flat beyond the largest measured one; one device unchanged.
    assert fit.step_s(64, devices=8) == pytest.approx(0.114)
    assert fit.step_s(64) == pytest.approx(0.084)
    assert fit.samples_per_s(64, devices=2) == pytest.approx(2 * 64 / 0.114)


def test_superlinear_and_missing_points_fall_back_as_documented():
    faster = Scaling.from_steps(0.1, {4: 0.08})
    assert faster.at(4).sync_s == 0 and faster.at(4).rank_factor == pytest.approx(0.8)
    assert faster.at(2).rank_factor == pytest.approx(1 - 0.2 / 3)  # halfway in n from 1 to 4
    assert Scaling.from_points(0.02, 0.001, [(1, 32, 0.052)]).at(8).sync_s == 0
    assert Scaling.from_steps(0.1, {2: float("nan"), 0: 0.3}).measured == {}
