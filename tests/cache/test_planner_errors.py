"""Malformed and unsupported pipelines get located, precise errors."""

from __future__ import annotations

import pytest

from gpufair.cache.planner import LoadLimits, PipelineError, parse_pipeline
from gpufair.common.errors import InvalidArgument

ARGO_HEAD = "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: {name: w}\nspec:\n"


def error_of(text: str, **kw) -> PipelineError:
    with pytest.raises(PipelineError) as info:
        parse_pipeline(text, "p.yaml", **kw)
    assert isinstance(info.value, InvalidArgument)
    return info.value


def test_yaml_syntax_error_has_line_and_column() -> None:
    e = error_of("a: [1, 2\nb: 3\n")
    assert e.line == 2 and e.column is not None and str(e).startswith("p.yaml:2:")


def test_wrong_type_names_the_path_and_the_expectation() -> None:
    text = ARGO_HEAD + "  entrypoint: main\n  templates:\n  - name: main\n    dag:\n      tasks:\n      - [not, a, task]\n"
    e = error_of(text)
    assert e.path == "spec.templates[0].dag.tasks[0]"
    assert "expected a mapping, got list" in str(e) and e.line == 10


def test_unknown_template_and_dependency_are_reported() -> None:
    base = ARGO_HEAD + "  entrypoint: main\n  templates:\n  - name: main\n    dag:\n      tasks:\n"
    e = error_of(base + "      - {name: a, template: nope}\n")
    assert "unknown template 'nope'" in str(e) and e.path.endswith("tasks[0].template")
    e = error_of(base + "      - {name: a, template: main, dependencies: [zz]}\n")
    assert "unknown task 'zz'" in str(e)


def test_dependency_cycle_is_refused() -> None:
    base = ARGO_HEAD + "  entrypoint: main\n  templates:\n  - {name: t, container: {image: x}}\n  - name: main\n    dag:\n      tasks:\n"
    e = error_of(base + "      - {name: a, template: t, dependencies: [b]}\n      - {name: b, template: t, dependencies: [a]}\n")
    assert "cycle" in str(e)


def test_deep_nesting_is_bounded() -> None:
    chain = "".join(f"  - name: g{i}\n    dag:\n      tasks:\n      - {{name: t, template: g{i + 1}}}\n"
                    for i in range(40))
    text = ARGO_HEAD + "  entrypoint: g0\n  templates:\n" + chain + "  - {name: g40, container: {image: x}}\n"
    assert "nested deeper" in str(error_of(text))


@pytest.mark.parametrize("text,needle", [
    ("apiVersion: argoproj.io/v2\nkind: Workflow\nspec: {}\n", "unsupported apiVersion"),
    ("apiVersion: argoproj.io/v1alpha1\nkind: Sensor\nspec: {}\n", "unsupported kind"),
    ("schemaVersion: 3.0.0\nroot: {dag: {tasks: {}}}\ncomponents: {}\n", "unsupported schemaVersion"),
    ("kind: Deployment\napiVersion: apps/v1\n", "not a Kubeflow pipeline"),
    ("- just\n- a list\n", "expected a mapping"),
    ("", "no YAML document"),
    ("root: {dag: {tasks: {t: {componentRef: {name: missing}}}}}\ncomponents: {}\n", "unknown component 'missing'"),
    ("root: {dag: {tasks: {}}}\ncomponents: {}\n---\nsomething: else\n", "PlatformSpec"),
    ("x: !!python/object:os.system ls\n", "invalid YAML"),
])
def test_unsupported_or_wrong_documents(text: str, needle: str) -> None:
    assert needle in str(error_of(text))


def test_limits_refuse_alias_bombs_depth_and_size() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(7)
    )
    assert "alias" in str(error_of(bomb))
    assert "nesting deeper" in str(error_of("[" * 500 + "]" * 500))
    assert "larger than" in str(error_of("x: " + "y" * 2000, limits=LoadLimits(max_bytes=1000)))
    assert "recursive alias" in str(error_of("a: &a [*a]\n"))


def _package(kind: str, files: dict[str, bytes]) -> bytes:
    import io
    import tarfile
    import zipfile
    buf = io.BytesIO()
    if kind == "zip":
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, data in files.items():
                zf.writestr(name, data)
    else:
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


PIPE = (ARGO_HEAD + "  entrypoint: t\n  templates:\n  - {name: t, container: {image: x, args: ['s3://b/k']}}\n").encode()


@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_pipeline_packages_are_unpacked(kind: str) -> None:
    # `dsl-compile --output p.tar.gz` and the KFP upload API use packages.
    p = parse_pipeline(_package(kind, {"pipeline.yaml": PIPE, "README.md": b"x"}), "p." + kind)
    assert p.step("t").datasets == ("s3://b/k",)
    two = _package(kind, {"a.yaml": PIPE, "b.yaml": PIPE})
    assert "one YAML or JSON file" in str(error_of(two))


def test_a_decompression_bomb_is_refused_not_expanded() -> None:
    import gzip
    bomb = gzip.compress(b"a: " + b"0" * (64 * 1024 * 1024))  # 64 MiB of YAML in ~64 KiB
    assert len(bomb) < 1024 * 1024
    assert "larger than" in str(error_of(bomb, limits=LoadLimits(max_bytes=1024 * 1024)))
    zipped = _package("zip", {"pipeline.yaml": b"a: " + b"0" * (8 * 1024 * 1024)})
    assert "larger than" in str(error_of(zipped, limits=LoadLimits(max_bytes=1024 * 1024)))
