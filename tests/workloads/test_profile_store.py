"""Profile records round-trip through JSON, the in-memory store and a real etcd."""

from __future__ import annotations

import json
import socket

import aetcd
import pytest

from gpufair.client.workloads.record import Measurement, Profile
from gpufair.client.workloads.store import (
    EtcdProfileStore,
    InMemoryProfileStore,
    etcd_profile_store,
    parse_endpoint,
)
from gpufair.common.errors import InvalidArgument, Unavailable
from gpufair.common.keys import Keys


def _m(devices: int, batch: int, step_s: float, model: str = "resnet18") -> Measurement:
    return Measurement(model=model, device_type="cpu", devices=devices, batch=batch,
                       samples_per_s=devices * batch / step_s, step_s=step_s, step_s_p10=step_s * 0.9,
                       step_s_p90=step_s * 1.1, peak_mem_bytes=1 << 20)


def _profile(model: str = "resnet18") -> Profile:
    points = [_m(1, 8, 0.01 + 8e-3, model), _m(1, 32, 0.01 + 32e-3, model), _m(2, 8, 0.03, model)]
    return Profile.build(points, image_size=32, created_unix=1.5e9, torch_version="2.x")


def test_build_fits_the_one_device_points_and_fills_scaling() -> None:
    p = _profile()
    assert p.fit is not None and p.fit_devices == 1
    assert p.fit.a_s == pytest.approx(0.01) and p.fit.c_s == pytest.approx(1e-3)
    two = next(m for m in p.measurements if m.devices == 2)
    one = next(m for m in p.measurements if m.devices == 1 and m.batch == 8)
    assert two.scaling_eff == pytest.approx(two.samples_per_s / (2 * one.samples_per_s))


def test_one_batch_size_gives_no_fit_and_mixed_models_are_refused() -> None:
    assert Profile.build([_m(1, 8, 0.1)], image_size=32, created_unix=0).fit is None
    with pytest.raises(InvalidArgument, match="one model"):
        Profile.build([_m(1, 8, 0.1), _m(1, 16, 0.2, model="cnn")], image_size=32, created_unix=0)


def test_json_round_trip_is_lossless() -> None:
    p = _profile()
    assert Profile.from_json(p.to_json()) == p
    assert Profile.from_json(p.to_json().encode()) == p


@pytest.mark.parametrize("mutate", [
    lambda d: "not json",
    lambda d: json.dumps([1]),
    lambda d: json.dumps({k: v for k, v in d.items() if k != "model"}),
    lambda d: json.dumps({**d, "surprise": 1}),
    lambda d: json.dumps({**d, "schema": 99}),
    lambda d: json.dumps({**d, "measurements": [{**d["measurements"][0], "batch": 0}]}),
])
def test_malformed_profile_json_is_an_invalid_argument(mutate) -> None:
    with pytest.raises(InvalidArgument):
        Profile.from_json(mutate(json.loads(_profile().to_json())))


async def test_in_memory_store_round_trips_and_lists() -> None:
    store = InMemoryProfileStore()
    assert await store.get("resnet18", "cpu") is None
    await store.put(_profile())
    await store.put(_profile("cnn"))
    assert await store.get("resnet18", "cpu") == _profile()
    assert [p.model for p in await store.list()] == ["cnn", "resnet18"]
    with pytest.raises(InvalidArgument):
        await store.get("../jobs", "cpu")


def test_parse_endpoint() -> None:
    assert parse_endpoint("127.0.0.1:2379") == ("127.0.0.1", 2379)
    assert parse_endpoint("http://etcd:1234/") == ("etcd", 1234)
    for bad in ("nohost", ":12", "h:99999", "h:x"):
        with pytest.raises(InvalidArgument):
            parse_endpoint(bad)


async def test_profiles_round_trip_through_real_etcd(etcd_endpoint: str, etcd_root: str) -> None:
    keys = Keys(root=etcd_root)
    async with etcd_profile_store(etcd_endpoint, keys) as store:
        assert await store.get("resnet18", "cpu") is None
        await store.put(_profile())
        await store.put(_profile("cnn"))
        assert await store.get("resnet18", "cpu") == _profile()
        assert sorted(p.model for p in await store.list()) == ["cnn", "resnet18"]
    # Stored where the scheduler will look, as plain JSON.
    host, port = parse_endpoint(etcd_endpoint)
    async with aetcd.Client(host, port) as client:
        kv = await client.get(keys.profile("resnet18", "cpu").encode())
    assert kv is not None and json.loads(kv.value)["model"] == "resnet18"


async def test_unreachable_etcd_is_unavailable() -> None:
    # A bound but not listening socket: connections to its port are refused.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        client = aetcd.Client("127.0.0.1", sock.getsockname()[1], timeout=2)
        try:
            with pytest.raises(Unavailable, match="etcd"):
                await EtcdProfileStore(client).put(_profile())
        finally:
            await client.close()
