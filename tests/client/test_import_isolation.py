"""The trainer library and the CLI load no service code, etcd, S3 or Kubernetes client when imported:
they speak only gRPC (`gpufair.api`) and use the small pure shared layer."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

FORBIDDEN = ("aetcd", "minio", "kubernetes", "gpufair.metrics", "gpufair.scheduler", "gpufair.cache")


def _loaded_by(code: str) -> list[str]:
    """Modules from FORBIDDEN that a fresh interpreter has loaded after running `code`."""
    probe = (f"import json, sys\n{code}\n"
             f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({FORBIDDEN!r}))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", ["gpufair.client", "gpufair.client.datasets", "gpufair.client.cli.main",
                                    "gpufair.client.cli"])
def test_importing_the_client_loads_no_service_etcd_or_s3_code(module: str) -> None:
    assert _loaded_by(f"import {module}") == []


def test_building_every_cli_command_loads_none_either() -> None:
    # main() builds the whole parser before it runs any command.
    assert _loaded_by("from gpufair.client.cli.main import build_parser; build_parser()") == []


def test_the_public_api_names_resolve_without_it() -> None:
    assert _loaded_by("import gpufair.client as c; c.resolve_dataset; c.ClientConfig; c.SplitCommand") == []


def test_the_check_itself_sees_a_service_import() -> None:
    assert "gpufair.scheduler.registry" in _loaded_by("import gpufair.scheduler.registry")
    assert "minio" in _loaded_by("import gpufair.cache.node")
