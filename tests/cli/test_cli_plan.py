"""`gpufair plan`: tables, JSON for scripts, exit codes, no tracebacks."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from gpufair.client.cli.plan import register

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "kfp"


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpufair")
    register(parser.add_subparsers())
    args = parser.parse_args(["plan", *argv])
    return args.func(args)


def test_json_output_has_the_documented_keys(capsys) -> None:
    assert run_cli([str(FIXTURES / "ir-multidoc-platform.yaml"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == "kfp-v2-ir"
    train = next(s for s in doc["steps"] if s["name"] == "train")
    assert train["gpus"] == 2 and "import-train" in train["depends_on"]
    ds = {d["uri"]: d for d in doc["datasets"]}
    assert ds["s3://datasets/cifar10/train/"]["consumers"] == ["train"]
    assert any("holdout_uri" in u["reason"] for u in doc["unresolved"])


def test_table_output_explains_what_was_not_resolved(capsys) -> None:
    assert run_cli([str(FIXTURES / "argo-nested-loops.yaml"), "--bandwidth", "50"]) == 0
    out = capsys.readouterr().out
    assert "training/fit" in out and "s3://datasets/imagenet/train/" in out
    assert "could not resolve" in out and "eval-data" in out


def test_params_sizes_and_durations_files(tmp_path, capsys) -> None:
    sizes = tmp_path / "sizes.json"
    sizes.write_text(json.dumps({"s3://x/holdout": 5_000_000}))
    durations = tmp_path / "d.json"
    durations.write_text(json.dumps({"train": [600]}))
    argv = [str(FIXTURES / "ir-multidoc-platform.yaml"), "--json", "-p", "holdout_uri=s3://x/holdout",
            "--sizes", str(sizes), "--durations", str(durations), "--bandwidth", "1"]
    assert run_cli(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    holdout = next(d for d in doc["datasets"] if d["uri"] == "s3://x/holdout")
    assert holdout["size_bytes"] == 5_000_000 and holdout["transfer_s"] == 5
    assert holdout["deadline_s"] == 660 and holdout["status"] == "scheduled"


@pytest.mark.parametrize("content,needle", [
    ("a: [1\n", "bad.yaml:2:"),
    ("apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nspec: {templates: 3}\n", "spec.templates: expected a list"),
    ("\xff\xfe", "not UTF-8"),
])
def test_bad_yaml_exits_2_with_one_line_on_stderr(tmp_path, capsys, content, needle) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(content.encode("latin-1"))
    assert run_cli([str(bad)]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and err.count("\n") == 1


def test_missing_file_and_bad_flags_exit_2(tmp_path, capsys) -> None:
    assert run_cli([str(tmp_path / "nope.yaml")]) == 2
    assert capsys.readouterr().err.strip() == \
        f"gpufair plan: cannot read {tmp_path / 'nope.yaml'}: No such file or directory"
    assert run_cli([str(FIXTURES / "v1-argo-artifact_pipeline.yaml"), "--bandwidth", "0"]) == 2
    assert run_cli([str(FIXTURES / "v1-argo-artifact_pipeline.yaml"), "-p", "novalue"]) == 2
    assert "Traceback" not in capsys.readouterr().err
