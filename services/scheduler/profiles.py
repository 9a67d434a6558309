"""Exclusive-speed profiles: the one owner of `profiles/<model>/<gpu_type>` in etcd.

A profile arrives as the `Profile` message (PutProfile), is validated here and
stored as that message's JSON form, so the stored record and the wire record
are one definition; the decision loop reads back only each profile's fit.
"""

from __future__ import annotations

import logging
import math

from google.protobuf import json_format

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.common.errors import InvalidArgument, NotFound
from gpufair.common.state import Json, StateStore
from gpufair.common.keys import Keys
from gpufair.common.steptime import Scaling, StepTimeModel
from gpufair.scheduler.snapshot import Profiles

logger = logging.getLogger(__name__)

MAX_MEASUREMENTS = 1000


def _key(keys: Keys, model: str, device_type: str) -> str:
    try:
        return keys.profile(model, device_type)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def validate_profile(p: pb.Profile) -> pb.Profile:
    """`p` if the scheduler can use it; InvalidArgument naming what is wrong otherwise."""
    if len(p.measurements) > MAX_MEASUREMENTS:
        raise InvalidArgument(f"a profile holds at most {MAX_MEASUREMENTS} measurements, got {len(p.measurements)}")
    for i, m in enumerate(p.measurements):
        if (m.model, m.device_type) != (p.model, p.device_type):
            raise InvalidArgument(f"measurement {i} is of {m.model}/{m.device_type}, not the profile's {p.model}/{p.device_type}")
        if m.devices < 1 or m.batch < 1 or not _positive(m.samples_per_s) or not _positive(m.step_s):
            raise InvalidArgument(f"measurement {i} has non-positive devices, batch, throughput or step time")
    if p.HasField("fit"):
        a, c = p.fit.a_s, p.fit.c_s
        if not (math.isfinite(a) and math.isfinite(c)) or a < 0 or c < 0 or a + c <= 0:
            raise InvalidArgument(f"fit t(b) = {a} + {c}*b needs finite a_s, c_s >= 0, not both 0")
    if not p.HasField("fit") and not p.measurements:
        raise InvalidArgument("a profile needs a fit or at least one measurement")
    return p


def _to_json(p: pb.Profile) -> Json:
    return json_format.MessageToDict(p, preserving_proto_field_name=True)


def _from_json(key: str, value: Json) -> pb.Profile | None:
    # Records of earlier versions (with a "schema" field) parse too: the message kept their field names.
    try:
        return json_format.ParseDict(value, pb.Profile(), ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        logger.warning("profile %s is malformed; ignored: %s", key, exc)
        return None


class ProfileStore:
    """Profiles in etcd, behind the scheduler's RPCs."""

    def __init__(self, state: StateStore, keys: Keys) -> None:
        self._state, self._keys = state, keys

    async def put(self, profile: pb.Profile) -> bool:
        """Store a validated profile; True if it replaced one."""
        key = _key(self._keys, profile.model, profile.device_type)
        validate_profile(profile)
        existed = await self._state.get(key) is not None
        await self._state.put(key, _to_json(profile))
        return existed

    async def get(self, model: str, device_type: str) -> pb.Profile:
        key = _key(self._keys, model, device_type)
        stored = await self._state.get(key)
        profile = None if stored is None else _from_json(key, stored.value)
        if profile is None:
            raise NotFound(f"no profile of model {model!r} on device type {device_type!r}")
        return profile

    async def list(self) -> list[pb.Profile]:
        values, _ = await self._state.get_prefix(self._keys.profiles_prefix())
        found = (_from_json(k, v.value) for k, v in sorted(values.items()))
        return [p for p in found if p is not None]

    async def fits(self) -> Profiles:
        """Every usable step-time fit by (model, device type): what the decision loop needs."""
        out: dict[tuple[str, str], StepTimeModel] = {}
        for p in await self.list():
            if not p.HasField("fit"):
                continue
            try:
                validate_profile(p)
            except InvalidArgument as exc:
                logger.warning("profile %s/%s is unusable; ignored: %s", p.model, p.device_type, exc)
                continue
            # The measured multi-device steps give the model's sync cost per scale,
            # as the simulator takes it from Gavel's N-GPU throughputs.
            scaling = Scaling()
            if p.fit_devices <= 1:
                scaling = Scaling.from_points(p.fit.a_s, p.fit.c_s, (
                    (m.devices, m.batch, m.step_s) for m in p.measurements))
            out[(p.model, p.device_type)] = StepTimeModel(p.fit.a_s, p.fit.c_s, scaling)
        return out
