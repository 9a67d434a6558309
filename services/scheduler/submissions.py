"""Jobs that asked for GPUs (`gpufair submit`) and wait to be placed, in etcd
at `submissions/<job>`, so the queue survives a leader's death: a new leader
reads the same submissions and orders them by the same rule.

A submission is created once (create-if-absent), placed once by the
leader's round (a versioned write: two leaders can never both place it),
and deleted when its trainers register or its submitter withdraws it. A
placed submission holds its GPUs until then; one whose trainers have not
registered `PLACED_TTL_S` after its placement is dropped by the leader (its
submitter is gone).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from gpufair.common.errors import AlreadyExists, InvalidArgument, NotFound
from gpufair.common.keys import Keys, check_segment
from gpufair.common.state import StateStore

_MAX_DEVICES = 4096
PLACED_TTL_S = 600.0


@dataclass(frozen=True)
class Submission:
    """A job's request for `num_gpus` of the `devices` offered on `node`."""

    job_id: str
    num_gpus: int
    node: str
    devices: tuple[str, ...]
    device_type: str = "emulated"
    model: str = ""
    global_batch: int = 1
    total_samples: int = 0  # 0: unknown
    exclusive_rate: float = 0.0  # samples/s alone on its GPUs; 0: unknown
    dataset: str = ""
    submitted_unix_s: float = 0.0
    placed: tuple[str, ...] = ()  # devices it got, by rank; empty while it waits
    placed_unix_s: float = 0.0
    predicted_sd: float = 0.0  # at placement (`policy.fleet.Placed`)
    placed_why: str = ""
    version: int = 1

    def to_json(self) -> dict:
        return {**asdict(self), "devices": list(self.devices), "placed": list(self.placed)}

    @classmethod
    def from_json(cls, d: dict) -> Submission:
        return cls(**{**d, "devices": tuple(d["devices"]), "placed": tuple(d.get("placed", ()))})


def validate_submission(s: Submission) -> Submission:
    """`s`, or InvalidArgument naming the first field that is wrong."""
    for kind, value in (("job id", s.job_id), ("node", s.node)):
        try:
            check_segment(kind, value)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
    if not 1 <= s.num_gpus <= _MAX_DEVICES:
        raise InvalidArgument(f"num_gpus must be 1-{_MAX_DEVICES}, got {s.num_gpus}")
    if not 1 <= len(s.devices) <= _MAX_DEVICES or len(set(s.devices)) != len(s.devices) \
            or not all(d and len(d) <= 200 for d in s.devices):
        raise InvalidArgument(f"devices must be 1-{_MAX_DEVICES} distinct ids of 1-200 characters")
    if s.num_gpus > len(s.devices):
        raise InvalidArgument(f"num_gpus {s.num_gpus} is more than the {len(s.devices)} devices offered")
    if s.global_batch < s.num_gpus:
        raise InvalidArgument(f"global_batch {s.global_batch} must be >= num_gpus {s.num_gpus}")
    if s.total_samples < 0 or not (math.isfinite(s.exclusive_rate) and s.exclusive_rate >= 0):
        raise InvalidArgument("total_samples and exclusive_samples_per_s must be >= 0")
    if len(s.model) > 200 or len(s.dataset) > 2048 or len(s.device_type) > 200:
        raise InvalidArgument("model, device_type (200) or dataset (2048 characters) too long")
    return s


class SubmissionStore:
    """The submissions in etcd."""

    def __init__(self, state: StateStore, keys: Keys) -> None:
        self._state, self._keys = state, keys

    async def submit(self, s: Submission) -> Submission:
        """Store a new submission (AlreadyExists if one waits under that id)."""
        s = validate_submission(replace(s, placed=(), version=1))
        if not await self._state.create_if_absent(self._keys.submission(s.job_id), s.to_json()):
            raise AlreadyExists(f"job {s.job_id!r} is already submitted; withdraw it first")
        return s

    async def get(self, job_id: str) -> Submission:
        stored = await self._state.get(self._keys.submission(job_id))
        if stored is None:
            raise NotFound(f"no submission {job_id!r}")
        return Submission.from_json(stored.value)

    async def find(self, job_id: str) -> Submission | None:
        """The submission, or None."""
        try:
            return await self.get(job_id)
        except NotFound:
            return None

    async def list(self) -> list[Submission]:
        values, _ = await self._state.get_prefix(self._keys.submissions_prefix())
        return [Submission.from_json(v.value) for _, v in sorted(values.items())]

    async def place(self, s: Submission, devices: tuple[str, ...], now: float, predicted_sd: float = 0.0,
                    why: str = "") -> Submission:
        """Record where `s` goes (StaleVersion if it changed since it was read)."""
        placed = replace(s, placed=devices, placed_unix_s=now, predicted_sd=predicted_sd, placed_why=why[:500],
                         version=s.version + 1)
        await self._state.put_versioned(self._keys.submission(s.job_id), placed.to_json())
        return placed

    async def withdraw(self, job_id: str) -> bool:
        """Delete the submission; False if there was none."""
        return bool(await self._state.delete(self._keys.submission(job_id)))
