"""t(b) = a + c*b fitting: exact on exact points, least squares on relative error, refuses bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufair.client.workloads.fit import StepTimeModel, fit_step_time, relative_errors
from gpufair.common.errors import InvalidArgument


@given(
    a=st.floats(1e-4, 1.0),
    c=st.floats(1e-7, 1e-2),
    batches=st.lists(st.integers(1, 4096), min_size=2, max_size=8, unique=True),
)
def test_fit_recovers_known_a_and_c_from_exact_points(a: float, c: float, batches: list[int]) -> None:
    fit = fit_step_time([(b, a + c * b) for b in batches])
    assert math.isclose(fit.a_s, a, rel_tol=1e-6, abs_tol=1e-9)
    assert math.isclose(fit.c_s, c, rel_tol=1e-6, abs_tol=1e-12)


def test_fit_is_least_squares_on_relative_error() -> None:
    points = [(1, 1.1), (2, 1.9), (3, 3.2), (4, 3.8)]
    fit = fit_step_time(points)
    # An independent solve: each row of [1, b] = t divided by t.
    rows = np.array([[1.0 / t, b / t] for b, t in points])
    (a, c), *_ = np.linalg.lstsq(rows, np.ones(len(points)), rcond=None)
    assert math.isclose(fit.a_s, a, rel_tol=1e-9) and math.isclose(fit.c_s, c, rel_tol=1e-9)
    assert max(relative_errors(fit, points)) < 0.1


def test_a_profile_spanning_tenfold_step_times_is_fitted_at_its_smallest_batch_too() -> None:
    # A CPU profile measured under load; plain least squares misses batch 4 by 69 %.
    points = [(4, 0.001358), (32, 0.006154), (128, 0.013740)]
    assert max(relative_errors(fit_step_time(points), points)) < 0.3


def test_negative_intercept_is_refit_through_the_origin() -> None:
    fit = fit_step_time([(1, 0.5), (2, 2.0), (3, 3.5)])
    assert fit.a_s == 0.0 and fit.c_s > 0
    assert fit.step_s(1) > 0


def test_shrinking_step_time_gives_a_constant_model() -> None:
    fit = fit_step_time([(1, 2.0), (2, 1.0)])
    # The constant closest in relative terms: (2 / 2**2 + 1 / 1**2) / (1 / 2**2 + 1 / 1**2).
    assert fit.c_s == 0.0 and math.isclose(fit.a_s, 1.2)


def test_samples_per_s_follows_the_model() -> None:
    model = StepTimeModel(a_s=0.01, c_s=0.001)
    assert math.isclose(model.samples_per_s(90), 90 / 0.1)
    assert math.isclose(model.samples_per_s(90, devices=2), 2 * 90 / 0.1)


@pytest.mark.parametrize(
    "points", [[], [(8, 0.1)], [(8, 0.1), (8, 0.2)], [(0, 0.1), (4, 0.2)], [(1, -1.0), (2, 1.0)],
               [(1, float("nan")), (2, 1.0)]],
)
def test_bad_points_are_invalid_arguments(points: list) -> None:
    with pytest.raises(InvalidArgument):
        fit_step_time(points)
