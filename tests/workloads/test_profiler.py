"""The profiler on CPU: real spawned data-parallel training, self-consistent numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufair.client.cli import profile as profile_cli
from gpufair.client.workloads import profiler
from gpufair.client.workloads.fit import relative_errors
from gpufair.client.workloads.profiler import ProfileConfig, run_profile
from gpufair.common.errors import FailedPrecondition, InvalidArgument

BATCHES = (4, 32, 128)


@pytest.fixture(scope="module")
def cnn_profile():
    # One spawn per device count; every point is real timed SGD steps.
    return run_profile(ProfileConfig(model="cnn", batches=BATCHES, devices=(1, 2), image_size=16,
                                     width=4, steps=8, warmup=2))


def test_every_point_is_measured_with_positive_numbers(cnn_profile) -> None:
    got = {(m.devices, m.batch) for m in cnn_profile.measurements}
    assert got == {(n, b) for n in (1, 2) for b in BATCHES}
    for m in cnn_profile.measurements:
        assert m.device_type == "cpu" and m.gpu_util_pct is None  # no NVML here
        assert m.samples_per_s > 0 and m.peak_mem_bytes > 0
        assert m.step_s_p10 <= m.step_s <= m.step_s_p90
        # samples/s is a mean over the timed steps, step_s their median: machine
        # noise only drags the mean upwards, never below the fastest steps.
        mean_step = m.devices * m.batch / m.samples_per_s
        assert mean_step >= 0.9 * m.step_s_p10


def test_throughput_grows_with_batch_as_the_fitted_model_predicts(cnn_profile) -> None:
    ones = sorted((m for m in cnn_profile.measurements if m.devices == 1), key=lambda m: m.batch)
    fit = cnn_profile.fit
    assert fit is not None and cnn_profile.fit_devices == 1
    assert fit.c_s > 0  # bigger batches cost more per step...
    assert ones[-1].samples_per_s > ones[0].samples_per_s  # ...but amortise the fixed cost
    points = [(m.batch, m.step_s) for m in ones]
    assert max(relative_errors(fit, points)) < 0.5, (fit, points)
    for m in ones:
        assert 0.5 < fit.samples_per_s(m.batch) / m.samples_per_s < 2.0


def test_scaling_efficiency_is_relative_to_one_device(cnn_profile) -> None:
    for m in cnn_profile.measurements:
        if m.devices == 1:
            assert m.scaling_eff == pytest.approx(1.0)
        else:
            one = next(o for o in cnn_profile.measurements if o.devices == 1 and o.batch == m.batch)
            assert m.scaling_eff == pytest.approx(m.samples_per_s / (2 * one.samples_per_s))
            assert 0 < m.scaling_eff < 1.5


@pytest.mark.parametrize("measured", [True, False])
def test_a_rank_dying_after_the_result_is_written_loses_nothing(cnn_profile, monkeypatch, measured) -> None:
    """gloo's teardown can abort a rank after every rank has measured and rank 0
    has written the result: those measurements stand. Before that, the run fails."""
    rows = [m.to_dict() for m in cnn_profile.measurements if m.devices == 2]

    def spawn(fn, args, nprocs, join):
        if measured:
            Path(args[2], "result.json").write_text(json.dumps(rows))
        raise RuntimeError("process 0 terminated with signal SIGABRT")

    monkeypatch.setattr(profiler.mp, "spawn", spawn)
    cfg = ProfileConfig(model="cnn", batches=BATCHES, devices=(2,), image_size=16, width=4)
    if measured:
        got = profiler._run_group(cfg, 2)
        assert [m.to_dict() for m in got] == rows
    else:
        with pytest.raises(FailedPrecondition, match="profiling cnn on 2 device.s. failed: process 0 "
                                                     "terminated with signal SIGABRT"):
            profiler._run_group(cfg, 2)


def test_bad_configs_are_refused_before_spawning() -> None:
    for cfg in (ProfileConfig(model="nope", batches=(8,)), ProfileConfig(model="cnn", batches=()),
                ProfileConfig(model="cnn", batches=(8,), devices=(0,)),
                ProfileConfig(model="cnn", batches=(8,), steps=0)):
        with pytest.raises(InvalidArgument):
            run_profile(cfg)


def _cli(args: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="gpufair")
    profile_cli.register(parser.add_subparsers(required=True))
    ns = parser.parse_args(args)
    return ns.func(ns)


def test_cli_json_has_the_documented_fields(capsys) -> None:
    rc = _cli(["profile", "--model", "mlp", "--batch", "8,16", "--devices", "1", "--json",
               "--image-size", "8", "--steps", "2", "--warmup", "1"])
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["batch"] for r in rows] == [8, 16]
    keys = {"model", "device_type", "devices", "batch", "samples_per_s", "step_s", "peak_mem_bytes",
            "scaling_eff"}
    assert all(keys <= set(r) for r in rows)


def test_cli_table_and_bad_model(capsys) -> None:
    assert _cli(["profile", "--model", "mlp", "--batch", "8,16", "--image-size", "8", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "samples/s" in out and "fit (1 device): t(b) =" in out
    assert _cli(["profile", "--model", "vgg99", "--batch", "8"]) == 2
    assert "unknown model 'vgg99'" in capsys.readouterr().err


async def test_cli_store_goes_to_the_scheduler_which_serves_it_back(etcd_endpoint: str, etcd_root: str, monkeypatch,
                                                                    capsys) -> None:
    import asyncio

    import grpc

    from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
    from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
    from gpufair.common.config import CommonConfig
    from gpufair.common.keys import Keys
    from gpufair.local import free_port
    from gpufair.scheduler.app import start_replica
    from gpufair.scheduler.profiles import ProfileStore
    from gpufair.scheduler.sources import PolicySettings

    cfg = CommonConfig(listen="127.0.0.1:0", etcd=etcd_endpoint, etcd_root=etcd_root, metrics_addr=f"127.0.0.1:{free_port()}")
    sched = await start_replica(cfg, PolicySettings("even", 1.0, 0.05))
    try:
        monkeypatch.setenv("GPUFAIR_SCHEDULER_ADDR", f"127.0.0.1:{sched.server.port}")
        monkeypatch.setenv("GPUFAIR_ETCD", "127.0.0.1:1")  # the CLI must not need etcd
        rc = await asyncio.to_thread(_cli, ["profile", "--model", "mlp", "--batch", "8,16", "--image-size", "8",
                                            "--steps", "2", "--store"])
        assert rc == 0
        assert "stored in the scheduler" in capsys.readouterr().out
        async with grpc.aio.insecure_channel(f"127.0.0.1:{sched.server.port}") as ch:
            stored = (await pb_grpc.SchedulerServiceStub(ch).GetProfile(pb.GetProfileRequest(model="mlp", device_type="cpu"))).profile
        assert {m.batch for m in stored.measurements} == {8, 16} and stored.HasField("fit")
        fits = await ProfileStore(sched.state, Keys(etcd_root)).fits()  # what the decision loop reads
        assert fits[("mlp", "cpu")].c_s == stored.fit.c_s
    finally:
        await sched.close()


def test_cli_store_with_the_scheduler_down_exits_1(monkeypatch, capsys) -> None:
    from gpufair.local import free_port

    monkeypatch.setenv("GPUFAIR_SCHEDULER_ADDR", f"127.0.0.1:{free_port()}")
    rc = _cli(["profile", "--model", "mlp", "--batch", "8", "--image-size", "8", "--steps", "1", "--store"])
    assert rc == 1
    assert "store profile: service unreachable" in capsys.readouterr().err
