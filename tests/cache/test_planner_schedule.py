"""Start-time prediction and EDF prefetch scheduling."""

from __future__ import annotations

import pytest

from gpufair.cache.planner import parse_pipeline, plan
from gpufair.cache.planner.schedule import Transfer, edf
from gpufair.common.errors import InvalidArgument

# a -> b -> d and a -> c -> d; b is slow, so c has slack.
DIAMOND = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {name: diamond}
spec:
  entrypoint: main
  templates:
  - name: main
    dag:
      tasks:
      - {name: a, template: t, arguments: {parameters: [{name: data, value: "s3://d/a"}]}}
      - {name: b, template: t, dependencies: [a], arguments: {parameters: [{name: data, value: "s3://d/b"}]}}
      - {name: c, template: t, dependencies: [a], arguments: {parameters: [{name: data, value: "s3://d/c"}]}}
      - {name: d, template: t, dependencies: [b, c], arguments: {parameters: [{name: data, value: "s3://d/d"}]}}
  - name: t
    inputs: {parameters: [{name: data}]}
    container: {image: x, args: ["{{inputs.parameters.data}}"]}
"""


def test_history_median_drives_critical_path_starts() -> None:
    p = parse_pipeline(DIAMOND, "d.yaml")
    history = {"a": [10, 1000, 12], "b": [100], "c": [5], p.step("d").history_key(p.name): [7]}
    pl = plan(p, durations=history, now=50.0)
    assert pl.step("a").duration_s == 12 and pl.step("a").duration_source == "history"
    assert pl.step("b").start_s == 62 and pl.step("c").start_s == 62
    assert pl.step("d").start_s == 162
    assert pl.makespan_s == 169 - 50  # measured from now
    assert pl.step("b").critical and not pl.step("c").critical and pl.step("c").slack_s == 95


def test_defaults_apply_without_history() -> None:
    pl = plan(parse_pipeline(DIAMOND, "d.yaml"))
    assert [pl.step(n).start_s for n in "abcd"] == [0, 60, 60, 120]
    assert all(s.duration_source == "default" for s in pl.steps)


def test_prefetches_run_nearest_deadline_first_and_late_ones_are_marked() -> None:
    p = parse_pipeline(DIAMOND, "d.yaml")
    mb = 1_000_000
    sizes = {"s3://d/a": 50 * mb, "s3://d/b": 20 * mb, "s3://d/c": 30 * mb, "s3://d/d": 10 * mb}
    pl = plan(p, sizes=sizes, bandwidth_bytes_per_s=1 * mb)
    order = sorted((d for d in pl.datasets if d.prefetch_start_s is not None), key=lambda d: d.prefetch_start_s)
    deadlines = [d.deadline_s for d in order]
    assert deadlines == sorted(deadlines)
    assert pl.dataset("s3://d/a").status == "late"  # needed at t=0, takes 50 s
    # transfers never overlap on the shared link
    for x, y in zip(order, order[1:]):
        assert x.prefetch_finish_s <= y.prefetch_start_s + 1e-9
    fast = plan(p, sizes=sizes, bandwidth_bytes_per_s=1e12)
    # only the dataset needed the moment the run starts cannot be early
    assert {d.dataset.uri for d in fast.datasets if d.status != "scheduled"} == {"s3://d/a"}


def test_edf_latest_start_packs_backwards_from_deadlines() -> None:
    slots = edf([Transfer("x", 100, 30), Transfer("y", 100, 20), Transfer("z", 50, 10)], now=0)
    assert slots["z"].start == 0 and slots["z"].on_time
    assert slots["y"].latest_start + 20 <= 100 and slots["x"].latest_start + 30 <= slots["y"].latest_start + 1e-9 or \
        slots["x"].latest_start + 30 <= 100
    assert max(s.finish for s in slots.values()) == 60


def test_unknown_sizes_are_reported_not_guessed() -> None:
    pl = plan(parse_pipeline(DIAMOND, "d.yaml"), bandwidth_bytes_per_s=1e6)
    assert {d.status for d in pl.datasets} == {"unknown-size"}


@pytest.mark.parametrize("kw", [
    {"bandwidth_bytes_per_s": 0}, {"bandwidth_bytes_per_s": float("nan")},
    {"sizes": {"s3://d/a": -1}}, {"durations": {"a": ["x"]}}, {"durations": {"a": [float("inf")]}},
    {"now": float("nan")},
])
def test_bad_plan_inputs_are_invalid_argument(kw) -> None:
    with pytest.raises(InvalidArgument):
        plan(parse_pipeline(DIAMOND, "d.yaml"), **kw)


def test_to_json_has_the_keys_scripts_rely_on() -> None:
    doc = plan(parse_pipeline(DIAMOND, "d.yaml")).to_json()
    assert {"format", "steps", "datasets", "unresolved"} <= doc.keys()
    assert {"name", "depends_on", "datasets", "gpus"} <= doc["steps"][0].keys()
    assert {"uri", "consumers"} <= doc["datasets"][0].keys()
