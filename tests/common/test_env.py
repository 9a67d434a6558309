"""Environment variables: one declaration each, one idea of "true", secrets from files,
and the README's table generated from the declarations."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from gpufair.client.config import ClientConfig
from gpufair.common import env
from gpufair.common.config import CommonConfig, S3Config
from gpufair.common.errors import InvalidArgument

REPO = Path(__file__).resolve().parents[2]


def _gen_env_doc():
    spec = importlib.util.spec_from_file_location("gen_env_doc", REPO / "scripts" / "gen_env_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_the_readme_table_is_the_declarations() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert _gen_env_doc().render(text) == text, "README.md's table drifted: run `make gen`"
    for var in env.VARS:
        assert f"| `{var.name}` | {var.default_text} |" in text


def test_every_default_reads_and_names_are_unique() -> None:
    assert len({v.name for v in env.VARS}) == len(env.VARS)
    for var in env.VARS:
        var.read({})  # no default fails its own reader


@pytest.mark.parametrize("raw, value", [("1", True), ("TRUE", True), ("yes", True), ("on", True), ("0", False),
                                        ("false", False), ("No", False), ("off", False), ("", False)])
def test_every_flag_has_one_idea_of_true(raw: str, value: bool) -> None:
    for var in (env.TLS, env.DISABLE, env.S3_SECURE):
        assert var.read({var.name: raw}) is value
    assert env.OPEN_READS.read({"GPUFAIR_OPEN_READS": raw}) is (value if raw else True)  # unset: its default, true


def test_a_malformed_value_is_an_error_naming_the_variable_the_value_and_what_is_expected() -> None:
    with pytest.raises(ValueError, match="GPUFAIR_S3_SECURE='maybe': expected a boolean"):
        S3Config.from_env({"GPUFAIR_S3_SECURE": "maybe"})
    with pytest.raises(ValueError, match="GPUFAIR_LEASE_TTL='abc': expected whole seconds from 2 to 3600"):
        CommonConfig.from_env("0.0.0.0:0", {"GPUFAIR_LEASE_TTL": "abc"})
    with pytest.raises(ValueError, match="GPUFAIR_LEASE_TTL='0': expected whole seconds"):  # parses, but out of range
        CommonConfig.from_env("0.0.0.0:0", {"GPUFAIR_LEASE_TTL": "0"})
    with pytest.raises(ValueError, match="GPUFAIR_PERIOD_S='nan': expected seconds from 0.05 to 3600"):
        env.PERIOD_S.read({"GPUFAIR_PERIOD_S": "nan"})
    with pytest.raises(ValueError, match="GPUFAIR_LOG_LEVEL='loud': expected one of DEBUG, INFO, WARNING, ERROR"):
        CommonConfig.from_env("0.0.0.0:0", {"GPUFAIR_LOG_LEVEL": "loud"})
    with pytest.raises(ValueError, match=r"\(5000 characters\)"):  # a long value is shown capped
        env.PROMETHEUS_PORT.read({"GPUFAIR_PROMETHEUS_PORT": "x" * 5000})
    with pytest.raises(InvalidArgument, match="GPUFAIR_DISABLE='2'"):  # trainers get the library's error type
        ClientConfig.from_env({"GPUFAIR_DISABLE": "2"})


def test_empty_means_unset_and_a_secret_file_wins(tmp_path: Path) -> None:
    assert CommonConfig.from_env("0.0.0.0:7", {"GPUFAIR_ETCD": "", "GPUFAIR_LISTEN": ""}).etcd == "127.0.0.1:2379"
    secret = tmp_path / "token"
    secret.write_text("from-file\n")
    e = {"GPUFAIR_ADMIN_TOKEN": "from-var", "GPUFAIR_ADMIN_TOKEN_FILE": str(secret)}
    assert CommonConfig.from_env("0.0.0.0:0", e).auth.admin_token == "from-file"
    assert CommonConfig.from_env("0.0.0.0:0", e).auth.job_token_secret == "from-file"  # derived from the admin token


def test_trainers_prefer_their_job_token_and_operators_the_admin_token() -> None:
    e = {"GPUFAIR_JOB_TOKEN": "job", "GPUFAIR_ADMIN_TOKEN": "admin"}
    assert ClientConfig.from_env(e).token == "job"
    assert ClientConfig.from_env(e, prefer_admin=True).token == "admin"
    assert ClientConfig.from_env({"GPUFAIR_ADMIN_TOKEN": "admin"}).token == "admin"


def test_the_node_name_has_one_default_everywhere() -> None:
    from gpufair.cache.node.config import NodeCacheConfig

    assert ClientConfig.from_env({}).node == CommonConfig.from_env("0:0", {}).node == \
        NodeCacheConfig.from_env({"GPUFAIR_CACHE_DIR": "/tmp/x"}).node == env.host_name()


def test_no_code_reads_gpufair_variables_around_the_declarations() -> None:
    # gpufair/local and gpufair/demo are left out: they compose their child processes' environments.
    reads = re.compile(r"""(environ|getenv|\benv|\be)(\.get\(|\[)\s*["'](GPUFAIR_|OTEL_)""")
    offenders = [f"{p.relative_to(REPO)}:{n}" for folder in ("client", "services", "gpufair/common", "gpufair/api")
                 for p in (REPO / folder).rglob("*.py") if p.name != "env.py"
                 for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if reads.search(line)]
    assert offenders == []
