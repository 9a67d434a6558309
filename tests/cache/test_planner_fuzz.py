"""Fuzzing the pipeline parser: hostile input yields PipelineError, never a crash.

Bounded in time: a fixed number of examples per property, each with a
deadline, and the loader's own limits keep every input small to process.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from gpufair.cache.planner import LoadLimits, PipelineError, parse_pipeline, plan

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "kfp"
LIMITS = LoadLimits(max_bytes=64 * 1024, max_expanded_nodes=20_000, max_depth=40)
FUZZ = settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow])


def parses_or_refuses(text: str | bytes) -> None:
    """The only allowed outcomes: a pipeline that plans, or a PipelineError."""
    try:
        pipeline = parse_pipeline(text, "fuzz.yaml", limits=LIMITS)
    except PipelineError as exc:
        assert str(exc).startswith("fuzz.yaml")
        return
    json.dumps(plan(pipeline, bandwidth_bytes_per_s=1e6).to_json())


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                    st.text(max_size=20), st.sampled_from(["s3://b/k", "{{item}}", "gs://x/y", "..", "/etc"]))
json_like = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=4),
                                                      st.dictionaries(st.text(max_size=8), c, max_size=4)),
                         max_leaves=30)


@FUZZ
@given(st.binary(max_size=2000))
def test_random_bytes(data: bytes) -> None:
    parses_or_refuses(data)


@FUZZ
@given(st.lists(st.sampled_from(list("{}[]:-&*!|>'\"#,? \n\tab01") + ["s3://", "<<", "&a", "*a"]), max_size=120))
def test_yaml_punctuation_soup(tokens: list[str]) -> None:
    parses_or_refuses("".join(tokens))


KEYS = ["apiVersion", "kind", "spec", "templates", "dag", "tasks", "steps", "name", "template",
        "dependencies", "depends", "arguments", "parameters", "artifacts", "withItems", "withParam",
        "root", "components", "deploymentSpec", "executors", "componentRef", "dependentTasks",
        "inputs", "importer", "artifactUri", "container", "schemaVersion", "platforms", "entrypoint",
        "runtimeValue", "componentInputParameter", "taskOutputArtifact", "parameterIterator", "s3"]
structured = st.recursive(
    scalars,
    lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(st.sampled_from(KEYS), c, max_size=5)),
    max_leaves=40,
)


@FUZZ
@given(structured, st.sampled_from(["argo", "ir", "none"]))
def test_structured_junk_with_kfp_shaped_keys(body, head: str) -> None:
    if head == "argo" and isinstance(body, dict):
        body = {**body, "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow"}
    elif head == "ir" and isinstance(body, dict):
        body = {**body, "root": body.get("root", {"dag": {"tasks": {}}}), "components": body.get("components", {})}
    parses_or_refuses(yaml.safe_dump(body))


def _mutations(doc, draw_path, value):
    """Replace one node of `doc` (found by following `draw_path`) with `value`."""
    if not draw_path or not isinstance(doc, (dict, list)) or not doc:
        return value
    keys = list(doc.keys()) if isinstance(doc, dict) else list(range(len(doc)))
    key = keys[draw_path[0] % len(keys)]
    copy = dict(doc) if isinstance(doc, dict) else list(doc)
    copy[key] = _mutations(doc[key], draw_path[1:], value)
    return copy


SAMPLES = {p.name: yaml.safe_load_all(p.read_text()) for p in sorted(FIXTURES.glob("*.yaml"))}
SAMPLES = {k: list(v) for k, v in SAMPLES.items()}


@FUZZ
@given(st.sampled_from(sorted(SAMPLES)), st.lists(st.integers(0, 50), max_size=8), json_like)
def test_real_pipelines_with_one_node_replaced(name: str, path: list[int], value) -> None:
    docs = SAMPLES[name]
    docs = [_mutations(docs[0], path, value), *docs[1:]]
    parses_or_refuses(yaml.safe_dump_all(docs))


@FUZZ
@given(st.integers(2, 12), st.integers(2, 12))
def test_alias_bombs_are_refused_quickly(width: int, levels: int) -> None:
    lines = ["l0: &l0 [" + ", ".join(["x"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    parses_or_refuses("\n".join(lines) + "\n")


@FUZZ
@given(st.integers(1, 2000), st.sampled_from(["[", "{a: ", "- "]))
def test_deep_nesting(depth: int, opener: str) -> None:
    closer = {"[": "]", "{a: ": "}", "- ": ""}[opener]
    if opener == "- ":
        text = "".join("  " * i + "-\n" for i in range(min(depth, 300)))
    else:
        text = opener * depth + "1" + closer * depth
    parses_or_refuses(text)


@FUZZ
@given(st.sampled_from(["1.0.0", "2.1.0", "3.0", 2, None, [], "v2"]),
       st.sampled_from(["argoproj.io/v1alpha1", "argoproj.io/v1", "v1", 3, None]))
def test_unknown_versions(schema, api) -> None:
    parses_or_refuses(yaml.safe_dump({"schemaVersion": schema, "root": {"dag": {"tasks": {}}}, "components": {}}))
    parses_or_refuses(yaml.safe_dump({"apiVersion": api, "kind": "Workflow", "spec": {"entrypoint": "m"}}))


def test_huge_document_is_refused_by_size() -> None:
    parses_or_refuses("a: " + "x" * (LIMITS.max_bytes + 1))
    parses_or_refuses("- 1\n" * (LIMITS.max_bytes // 4 + 10))
