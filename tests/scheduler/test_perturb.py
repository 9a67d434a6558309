"""Redrawn GPU types (`sim.perturb`) and the benchmark script that writes them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpufair.common.errors import InvalidArgument
from gpufair.scheduler.sim import load_colocation
from gpufair.scheduler.sim.colocation import read_file
from gpufair.scheduler.sim.perturb import SPEED_RANGE, perturb_file, perturb_type

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "scheduler" / "gavel-colocation-subset.json"


@pytest.fixture(scope="module")
def raw():
    return read_file(FIX)


def _load(tmp_path, data, gpu_type):
    path = tmp_path / "redrawn.json"
    path.write_text(json.dumps(data))
    return load_colocation(path, gpu_type)


def test_a_redrawn_type_loads_with_every_model_and_speeds_within_the_range(raw, tmp_path):
    redrawn = perturb_file(raw, ("p100",), (4,))
    after = _load(tmp_path, redrawn, "p100-s4")
    assert set(after.costs) == set(load_colocation(FIX, "p100").costs)
    ratios = [redrawn["p100-s4"][key]["null"] / entry["null"]
              for key, entry in raw["p100"].items() if key.endswith(", 1)")]
    assert min(ratios) >= SPEED_RANGE[0] and max(ratios) <= SPEED_RANGE[1]
    assert max(ratios) / min(ratios) > 1.2  # the models' lengths move relative to each other


@pytest.mark.parametrize("forbid", [0.0, 0.3, 1.0])
def test_pairs_become_unable_to_co_run_at_the_given_rate_and_measured_ones_stay(
        raw, tmp_path, forbid):
    before = load_colocation(FIX, "k80")
    redrawn = perturb_type(raw["k80"], 7, forbid)
    after = _load(tmp_path, {"x": redrawn}, "x")
    assert before.forbidden <= after.forbidden
    co_ran = {tuple(sorted(k)) for k in before.pair_fraction if k[0] != k[1]
              and (k[1], k[0]) in before.pair_fraction}
    lost = {p for p in co_ran if p[0] in after.costs and p not in
            {tuple(sorted(k)) for k in after.pair_fraction}}
    assert abs(len(lost) / len(co_ran) - forbid) < 0.1
    # A pair is drawn once: both of its entries agree.
    for key, entry in redrawn.items():
        for other, pair in entry.items():
            if other != "null" and other in redrawn and isinstance(pair, list):
                assert (pair == [0.0, 0.0]) == (redrawn[other][key] == [0.0, 0.0]) or \
                    raw["k80"][key][other] == [0, 0] or raw["k80"][other][key] == [0, 0]


def test_redrawing_is_seeded(raw):
    one = perturb_type(raw["p100"], 1)
    assert one == perturb_type(raw["p100"], 1)
    assert one != perturb_type(raw["p100"], 2)


def test_types_are_named_by_seed_and_an_unknown_one_is_refused(raw):
    assert list(perturb_file(raw, seeds=(1, 2))) == ["k80-s1", "k80-s2", "p100-s1", "p100-s2"]
    with pytest.raises(InvalidArgument, match="'v100' not in the file \\(has: k80, p100\\)"):
        perturb_file(raw, ("v100",))
    with pytest.raises(InvalidArgument, match="forbid must be a fraction"):
        perturb_type(raw["p100"], 1, forbid=1.5)


def _script(*args):
    return subprocess.run([sys.executable, str(ROOT / "bench" / "scheduler" / "perturb_colocation.py"),
                           "--colocation", str(FIX), *args], capture_output=True, text=True)


def test_the_script_writes_the_file_whole_and_bad_input_writes_nothing(tmp_path):
    out = tmp_path / "synth.json"
    done = _script("--gpu-types", "p100", "--seeds", "1,3", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "wrote p100-s1, p100-s3" in done.stdout
    assert set(json.loads(out.read_text())) == {"p100-s1", "p100-s3"}
    for bad, says in [(("--seeds", "one"), "--seeds: want comma-separated integers"),
                      (("--gpu-types", "t4"), "GPU type 't4' not in the file")]:
        other = tmp_path / "other.json"
        done = _script(*bad, "--out", str(other))
        assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr
        assert not other.exists()
    done = _script("--out", str(tmp_path / "missing" / "x.json"))
    assert done.returncode == 2 and "cannot write" in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["synth.json"]  # no temporary left
