"""Profile records: the profiler's fit and scaling, and the wire form PutProfile stores."""

from __future__ import annotations

import pytest

from gpufair.client.workloads.record import Measurement, Profile
from gpufair.common.errors import InvalidArgument


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


def test_the_wire_form_carries_every_field() -> None:
    p = _profile()
    msg = p.to_pb()
    assert (msg.model, msg.device_type, msg.image_size, msg.fit_devices, msg.created_unix, msg.torch_version) == \
        (p.model, p.device_type, p.image_size, p.fit_devices, p.created_unix, p.torch_version)
    assert (msg.fit.a_s, msg.fit.c_s) == (p.fit.a_s, p.fit.c_s)
    for sent, measured in zip(msg.measurements, p.measurements):
        got = {f: getattr(sent, f) for f in measured.to_dict() if f not in ("scaling_eff", "gpu_util_pct")}
        assert got == {k: v for k, v in measured.to_dict().items() if k not in ("scaling_eff", "gpu_util_pct")}
        # Unknown optional numbers stay unset rather than becoming 0.
        assert sent.HasField("scaling_eff") == (measured.scaling_eff is not None)
        assert not sent.HasField("gpu_util_pct")


def test_without_a_fit_the_wire_form_has_none() -> None:
    assert not Profile.build([_m(1, 8, 0.1)], image_size=32, created_unix=0).to_pb().HasField("fit")
