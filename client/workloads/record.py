"""Profile records: what the profiler measured and the fitted step-time model.

Stored in etcd at `profiles/<model>/<gpu_type>` as JSON (`Profile.to_json`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from gpufair.client.workloads.fit import StepTimeModel, fit_step_time
from gpufair.common.errors import InvalidArgument

SCHEMA = 1


@dataclass(frozen=True)
class Measurement:
    """One (devices, per-device batch) point: timed steps on synthetic data."""

    model: str
    device_type: str
    devices: int
    batch: int  # per device
    samples_per_s: float  # all devices together
    step_s: float  # median
    step_s_p10: float
    step_s_p90: float
    peak_mem_bytes: int  # per device (CUDA allocator peak, or process RSS high-water on CPU)
    scaling_eff: float | None = None  # throughput / (devices x one-device throughput)
    gpu_util_pct: float | None = None  # NVML, mean over the timed steps

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (the `gpufair profile --json` row)."""
        return asdict(self)


def with_scaling(points: Sequence[Measurement]) -> list[Measurement]:
    """Fill in scaling efficiency against the one-device point at the same batch."""
    single = {m.batch: m.samples_per_s for m in points if m.devices == 1}
    out = []
    for m in points:
        base = single.get(m.batch)
        eff = m.samples_per_s / (m.devices * base) if base else None
        out.append(replace(m, scaling_eff=eff))
    return out


@dataclass(frozen=True)
class Profile:
    """A model's exclusive-speed profile on one device type."""

    model: str
    device_type: str
    image_size: int
    measurements: tuple[Measurement, ...]
    fit: StepTimeModel | None  # from the fewest-device points; None with one batch size
    fit_devices: int
    created_unix: float
    torch_version: str = ""

    @classmethod
    def build(cls, measurements: Sequence[Measurement], *, image_size: int,
              created_unix: float, torch_version: str = "") -> Profile:
        """Assemble a profile, computing scaling efficiency and the step-time fit."""
        if not measurements:
            raise InvalidArgument("a profile needs at least one measurement")
        kinds = {(m.model, m.device_type) for m in measurements}
        if len(kinds) != 1:
            raise InvalidArgument(f"a profile covers one model on one device type, got {sorted(kinds)}")
        points = with_scaling(measurements)
        fewest = min(m.devices for m in points)
        pairs = [(float(m.batch), m.step_s) for m in points if m.devices == fewest]
        fit = fit_step_time(pairs) if len({b for b, _ in pairs}) >= 2 else None
        model, device_type = kinds.pop()
        return cls(model, device_type, image_size, tuple(points), fit, fewest,
                   created_unix, torch_version)

    def to_json(self) -> str:
        """JSON text, stable key order."""
        body = asdict(self)
        body["schema"] = SCHEMA
        return json.dumps(body, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Profile:
        """Parse `to_json` output; InvalidArgument naming what was wrong."""
        try:
            raw = json.loads(text)
        except ValueError as e:
            raise InvalidArgument(f"profile is not valid JSON: {e}") from None
        if not isinstance(raw, dict):
            raise InvalidArgument("profile JSON must be an object")
        if raw.pop("schema", SCHEMA) != SCHEMA:
            raise InvalidArgument(f"profile schema is not {SCHEMA}")
        try:
            ms = tuple(_measurement(m) for m in raw.pop("measurements"))
            fit = raw.pop("fit")
            body = _only(cls, raw)
            return cls(measurements=ms, fit=None if fit is None else StepTimeModel(**fit), **body)
        except (KeyError, TypeError) as e:
            raise InvalidArgument(f"profile JSON is missing or has a bad field: {e}") from None


def _only(cls: type, raw: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    unknown = set(raw) - names
    if unknown:
        raise InvalidArgument(f"unknown profile fields: {', '.join(sorted(unknown))}")
    return raw


def _measurement(raw: Any) -> Measurement:
    if not isinstance(raw, dict):
        raise InvalidArgument("each profile measurement must be an object")
    m = Measurement(**_only(Measurement, raw))
    if m.devices < 1 or m.batch < 1 or not (m.samples_per_s > 0 and math.isfinite(m.samples_per_s)):
        raise InvalidArgument(f"measurement {raw} has non-positive devices, batch or throughput")
    return m
