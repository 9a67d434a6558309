"""The scheduler's profile store: validates what PutProfile receives, keeps it as
the wire message's JSON, reads earlier versions' records, and hands the
decision loop only usable fits (behind the in-memory state)."""

from __future__ import annotations

import math

import pytest

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.common.errors import InvalidArgument, NotFound
from gpufair.common.keys import Keys
from gpufair.common.memstate import MemoryState
from gpufair.scheduler.profiles import ProfileStore

KEYS = Keys("/t")


def _profile(model: str = "resnet18", a: float = 0.01, c: float = 1e-3) -> pb.Profile:
    m = pb.ProfileMeasurement(model=model, device_type="cpu", devices=1, batch=8, samples_per_s=400.0, step_s=0.02,
                              step_s_p10=0.018, step_s_p90=0.022, peak_mem_bytes=1 << 20, scaling_eff=1.0)
    return pb.Profile(model=model, device_type="cpu", image_size=32, measurements=[m], fit=pb.StepTimeFit(a_s=a, c_s=c),
                      fit_devices=1, created_unix=1.5e9, torch_version="2.x")


async def test_put_get_list_round_trip_and_report_replacement() -> None:
    store = ProfileStore(MemoryState(), KEYS)
    assert await store.put(_profile()) is False
    assert await store.put(_profile()) is True
    await store.put(_profile("cnn"))
    assert await store.get("resnet18", "cpu") == _profile()
    assert [p.model for p in await store.list()] == ["cnn", "resnet18"]
    with pytest.raises(NotFound):
        await store.get("vgg", "cpu")


@pytest.mark.parametrize("mutate, words", [
    (lambda p: p.fit.CopyFrom(pb.StepTimeFit(a_s=-1, c_s=1e-3)), "fit"),
    (lambda p: p.fit.CopyFrom(pb.StepTimeFit(a_s=math.nan, c_s=1e-3)), "fit"),
    (lambda p: setattr(p.measurements[0], "batch", 0), "measurement 0"),
    (lambda p: setattr(p.measurements[0], "model", "cnn"), "measurement 0 is of cnn"),
    (lambda p: setattr(p, "model", "../jobs"), "not a valid id"),
    (lambda p: (p.ClearField("fit"), p.ClearField("measurements")), "needs a fit"),
])
async def test_bad_profiles_are_invalid_arguments_and_not_stored(mutate, words) -> None:
    state = MemoryState()
    p = _profile()
    mutate(p)
    with pytest.raises(InvalidArgument, match=words):
        await ProfileStore(state, KEYS).put(p)
    assert state.data == {}


async def test_a_record_written_by_the_earlier_client_store_still_reads() -> None:
    state = MemoryState()
    legacy = {"schema": 1, "model": "resnet18", "device_type": "cpu", "image_size": 32, "fit": {"a_s": 0.01, "c_s": 0.001},
              "fit_devices": 1, "created_unix": 1.5e9, "torch_version": "2.x",
              "measurements": [{"model": "resnet18", "device_type": "cpu", "devices": 1, "batch": 8, "samples_per_s": 400.0,
                                "step_s": 0.02, "step_s_p10": 0.018, "step_s_p90": 0.022, "peak_mem_bytes": 1048576,
                                "scaling_eff": None, "gpu_util_pct": None}]}
    await state.put(KEYS.profile("resnet18", "cpu"), legacy)
    fits = await ProfileStore(state, KEYS).fits()
    assert (fits[("resnet18", "cpu")].a_s, fits[("resnet18", "cpu")].c_s) == (0.01, 0.001)


async def test_the_loop_gets_only_usable_fits() -> None:
    state = MemoryState()
    store = ProfileStore(state, KEYS)
    await store.put(_profile("good"))
    no_fit = _profile("nofit")
    no_fit.ClearField("fit")
    await store.put(no_fit)
    await state.put(KEYS.profile("garbage", "cpu"), {"fit": "not a fit"})
    await state.put(KEYS.profile("negative", "cpu"), {"model": "negative", "device_type": "cpu", "fit": {"a_s": -1, "c_s": 1}})
    assert set(await store.fits()) == {("good", "cpu")}


async def test_multi_device_points_give_the_loop_the_sync_cost_and_the_exclusive_speed() -> None:
    store = ProfileStore(MemoryState(), KEYS)
    p = _profile(a=0.01, c=1e-3)
    two = pb.ProfileMeasurement(model="resnet18", device_type="cpu", devices=2, batch=8,
                                samples_per_s=2 * 8 / 0.03, step_s=0.03, step_s_p10=0.03,
                                step_s_p90=0.03, peak_mem_bytes=1 << 20)
    p.measurements.append(two)
    await store.put(p)
    fit = (await store.fits())[("resnet18", "cpu")]
    # Alone on 2 devices at 8 samples each a step took 0.03 s, against 0.018 s on one.
    assert fit.step_s(8, devices=2) == pytest.approx(0.03)
    assert fit.costs(2) == pytest.approx((0.022, 1e-3))
    assert fit.step_s(8) == pytest.approx(0.018)
