"""One map from failures to exit codes, whichever way a command fails: an RPC's
status, an error raised in the command, or a bad environment."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import grpc
import pytest

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from gpufair.client.cli.common import EXIT_FAIL, EXIT_OK, EXIT_USAGE, exit_code
from gpufair.common import errors
from gpufair.common.auth import auth_interceptors
from gpufair.common.config import AuthConfig, CommonConfig
from gpufair.local import free_port
from gpufair.scheduler.app import start_replica
from gpufair.scheduler.sources import PolicySettings

ADMIN = "admin-token-for-cli-tests"


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GPUFAIR_")}
    return subprocess.run([sys.executable, "-m", "gpufair.client.cli", *args], env={**clean, **env},
                          capture_output=True, text=True, timeout=60)


def test_the_callers_errors_are_2_and_the_systems_are_1() -> None:
    caller = {"INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "FAILED_PRECONDITION", "RESOURCE_EXHAUSTED",
              "PERMISSION_DENIED", "UNAUTHENTICATED", "OUT_OF_RANGE"}
    for code in grpc.StatusCode:
        if code is not grpc.StatusCode.OK:
            assert exit_code(code.name) == (EXIT_USAGE if code.name in caller else EXIT_FAIL), code
    # The domain errors the services raise use the same names.
    for cls in (errors.InvalidArgument, errors.NotFound, errors.PermissionDenied, errors.Unauthenticated):
        assert exit_code(cls.code_name) == EXIT_USAGE
    assert exit_code(errors.Unavailable.code_name) == exit_code(errors.GpufairError.code_name) == EXIT_FAIL


async def test_permission_denied_is_2_from_any_command(etcd_endpoint: str, etcd_root: str) -> None:
    cfg = CommonConfig(listen="127.0.0.1:0", etcd=etcd_endpoint, etcd_root=etcd_root, metrics_addr="127.0.0.1:1",
                       auth=AuthConfig(admin_token=ADMIN, job_token_secret="s"))
    replica = await start_replica(cfg, PolicySettings("even", 1.0, 0.05), interceptors=auth_interceptors(cfg))
    addr = f"127.0.0.1:{replica.server.port}"
    try:
        spec = pb.JobSpec(job_id="job-x", model="m", global_batch=8, total_samples=80,
                          ranks=[pb.RankPlacement(rank=i, device_id=f"g{i}") for i in range(2)])
        async with grpc.aio.insecure_channel(addr) as ch:
            res = await pb_grpc.SchedulerServiceStub(ch).RegisterJob(pb.RegisterJobRequest(spec=spec),
                                                                       metadata=(("authorization", f"Bearer {ADMIN}"),))
        job = {"GPUFAIR_SCHEDULER_ADDR": addr, "GPUFAIR_JOB_TOKEN": res.job_token}
        run = lambda env, *a: asyncio.to_thread(_cli, env, *a)  # noqa: E731 - the server shares this loop
        denied = await run(job, "policy", "set", "balance")
        assert denied.returncode == EXIT_USAGE and "PERMISSION_DENIED" in denied.stderr
        denied = await run(job, "split", "pin", "job-x", "6,2")
        assert denied.returncode == EXIT_USAGE and "PERMISSION_DENIED" in denied.stderr
        unauthenticated = await run({**job, "GPUFAIR_JOB_TOKEN": "forged"}, "policy", "set", "balance")
        assert unauthenticated.returncode == EXIT_USAGE and "UNAUTHENTICATED" in unauthenticated.stderr
        assert (await run(job, "policy", "get")).returncode == EXIT_OK  # open reads
        admin = await run({"GPUFAIR_SCHEDULER_ADDR": addr, "GPUFAIR_ADMIN_TOKEN": ADMIN, "GPUFAIR_JOB_TOKEN": res.job_token},
                          "policy", "set", "balance")
        assert admin.returncode == EXIT_OK, admin.stderr  # the CLI prefers the admin token
    finally:
        await replica.close()


@pytest.mark.parametrize("env, words", [({"GPUFAIR_TLS": "maybe"}, "GPUFAIR_TLS='maybe': expected a boolean"),
                                        ({"GPUFAIR_ADMIN_TOKEN_FILE": "/nonexistent/token"}, "/nonexistent/token")])
def test_a_bad_environment_is_one_line_and_2(env: dict[str, str], words: str) -> None:
    done = _cli(env, "jobs")
    assert done.returncode == EXIT_USAGE and words in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_service_that_is_down_is_1() -> None:
    done = _cli({"GPUFAIR_SCHEDULER_ADDR": f"127.0.0.1:{free_port()}"}, "policy", "get")
    assert done.returncode == EXIT_FAIL and "unreachable" in done.stderr


def test_submit_polls_placement_fast_at_first_then_at_the_queue_rate() -> None:
    """A submission wakes the scheduler, so a job placed at once must not wait a
    whole queue poll to start; a queued one settles to `_POLL_S` between calls."""
    from itertools import islice

    from gpufair.client.cli import submit

    delays = list(islice(submit.poll_delays(), 12))
    assert delays[0] < 0.1 * submit._POLL_S
    assert delays == sorted(delays) and delays[-1] == submit._POLL_S
    assert sum(delays[:4]) < submit._POLL_S  # four looks within the old first wait


def test_submit_asking_for_more_gpus_than_the_node_offers_is_one_line_and_2(tmp_path) -> None:
    """Refused before anything is submitted (no scheduler needed, no job id made up)."""
    done = _cli({"GPUFAIR_EMU_GPUS": "4", "GPUFAIR_EMU_DIR": str(tmp_path), "GPUFAIR_SCHEDULER_ADDR": f"127.0.0.1:{free_port()}"},
                "submit", "--gpus", "999", "--", "train.py")
    assert done.returncode == EXIT_USAGE, done.stderr
    assert done.stderr.strip() == ("gpufair: submit: --gpus 999, but this node offers 4 emulated GPUs "
                                   "(GPUFAIR_EMU_GPUS sets how many are emulated)")


@pytest.mark.parametrize("args, usage", [(("submit", "--gpus", "2", "--bogus", "--", "train.py"), "usage: gpufair submit "),
                                         (("policy", "set", "--bogus"), "usage: gpufair policy set "),
                                         (("jobs", "--bogus"), "usage: gpufair jobs ")])
def test_an_unknown_flag_is_reported_with_its_subcommands_usage(args: tuple[str, ...], usage: str) -> None:
    done = _cli({}, *args)
    assert done.returncode == EXIT_USAGE
    assert done.stderr.startswith(usage) and "unrecognized arguments: --bogus" in done.stderr, done.stderr
