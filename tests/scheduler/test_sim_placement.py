"""Placement rules: seeded determinism, the per-GPU cap, and bad names."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufair.client.cli import sim as sim_cli
from gpufair.common.errors import InvalidArgument
from gpufair.scheduler.sim import (SimConfig, choose_gpus, load_colocation, load_workload,
                                   placement_names, simulate)
from gpufair.scheduler.sim.engine import Simulator

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "scheduler"


@pytest.fixture(scope="module")
def k80():
    return load_colocation(FIX / "gavel-colocation-subset.json", "k80")


@pytest.fixture(scope="module")
def trace():
    return load_workload(FIX / "small-trace.csv")


def test_default_is_least_loaded_and_every_rule_is_listed():
    assert placement_names()[0] == "least-loaded" == SimConfig(4, "even").placement
    assert {"least-loaded", "packed", "random"} <= set(placement_names())


@given(occ=st.lists(st.integers(0, 4), min_size=1, max_size=24), need=st.integers(1, 8),
       cap=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=150, deadline=None)
def test_every_rule_respects_the_cap_and_fits_when_it_can(occ, need, cap, seed):
    room = [g for g, n in enumerate(occ) if n < cap]
    for rule in placement_names():
        got = choose_gpus(rule, occ, need, cap, np.random.default_rng(seed))
        again = choose_gpus(rule, occ, need, cap, np.random.default_rng(seed))
        assert got == again  # deterministic by seed
        if len(room) < need:
            assert got is None
            continue
        assert got is not None and len(set(got)) == need == len(got)
        assert list(got) == sorted(got) and all(occ[g] < cap for g in got)


def test_packed_is_first_fit_and_least_loaded_picks_the_emptiest():
    rng = np.random.default_rng(0)
    occ = [4, 1, 3, 0, 2, 0]
    assert choose_gpus("packed", occ, 2, 4, rng) == (1, 2)
    assert choose_gpus("least-loaded", occ, 3, 4, rng) == (1, 3, 5)


def test_random_spreads_over_seeds():
    occ = [0] * 16
    picks = {choose_gpus("random", occ, 2, 4, np.random.default_rng(s)) for s in range(20)}
    assert len(picks) > 5


def _max_occupancy(k80, trace, placement, seed):
    """Run a simulation, recording the most jobs ever seen on one GPU."""
    sim = Simulator(k80, trace, SimConfig(4, "sd-maxmin", seed=seed, placement=placement,
                                          max_per_gpu=2))
    seen = [0]
    apply = sim._apply

    def spy(plan, now):
        apply(plan, now)
        seen[0] = max(seen[0], *(len(o) for o in sim._occ))

    sim._apply = spy
    summary = sim.run().summary()
    for timing in ("mean_decision_ms", "mean_round_ms"):
        summary.pop(timing)
    return summary, seen[0]


@pytest.mark.parametrize("placement", ["packed", "random"])
def test_simulations_are_seeded_and_capped(k80, trace, placement):
    a, peak = _max_occupancy(k80, trace, placement, seed=5)
    b, _ = _max_occupancy(k80, trace, placement, seed=5)
    assert a == b and a["placement"] == placement
    assert 1 <= peak <= 2
    assert {j["job"] for j in a["jobs"]} == {t.job for t in trace}


def test_placement_changes_outcomes(k80, trace):
    runs = {p: simulate(k80, trace, SimConfig(6, "even", placement=p)).summary()
            for p in ("least-loaded", "packed")}
    # The rule is really used: packing shares GPU 0 from the second job on, spreading does not.
    assert runs["packed"]["jobs"] != runs["least-loaded"]["jobs"]


def test_unknown_placement_is_a_clear_error(k80, trace):
    with pytest.raises(InvalidArgument, match=r"'tightest'.*least-loaded, packed, random, sd"):
        simulate(k80, trace, SimConfig(4, "even", placement="tightest"))


def test_cli_placement_flag(capsys):
    parser = argparse.ArgumentParser(prog="gpufair")
    sim_cli.register(parser.add_subparsers())
    base = ["sim", "--colocation", str(FIX / "gavel-colocation-subset.json"), "--gpu-type",
            "k80", "--gpus", "6", "--policy", "even", "--workload", str(FIX / "small-trace.csv"),
            "--json"]
    args = parser.parse_args(base + ["--placement", "packed"])
    assert args.func(args) == 0
    assert '"placement": "packed"' in capsys.readouterr().out
    args = parser.parse_args(base + ["--placement", "nope"])
    assert args.func(args) == 2
    err = capsys.readouterr().err.strip()
    assert "'nope'" in err and "least-loaded" in err and "\n" not in err


def test_uneven_share_sees_packing(k80, trace):
    # 32 GPUs: spreading gives every job empty GPUs; first fit stacks jobs on GPU 0 and up.
    spread = simulate(k80, trace, SimConfig(32, "even")).summary()["uneven_share"]
    packed = simulate(k80, trace, SimConfig(32, "even", placement="packed")).summary()
    assert spread == 0.0
    assert 0.0 < packed["uneven_share"] <= 1.0
