"""The decision record: what a round decided, typed, and how it is kept in etcd.

The leader's loop builds a `DecisionRecord` each round and stores it at
`scheduler/decision`; any replica reads it back for ExplainDecision. This
module is the one place that knows its stored form.
"""

from __future__ import annotations

import base64
import json
import logging
import zlib
from dataclasses import asdict, dataclass

from gpufair.common.state import Json

logger = logging.getLogger(__name__)

# The round's record holds every job's explanation, ~425 bytes a job: as
# plain JSON, ~3,700 jobs would pass etcd's 1.5 MiB request limit, and every
# round writes it into etcd's history. Compressed it is ~4x smaller. The
# plain fields stay, with "jobs" empty, so a replica of an earlier version
# (mid-upgrade) reads a round without its jobs rather than failing.
_PACKED = "zlib_b64"
_MAX_RECORD = 64 * 1024 * 1024


@dataclass(frozen=True)
class JobDecisionRecord:
    """One job's part in a round."""

    job_id: str
    old: tuple[int, ...]
    new: tuple[int, ...]
    slowdown: float
    predicted_slowdown: float
    changed: bool
    explanation: str

    def to_json(self) -> Json:
        return {**asdict(self), "old": list(self.old), "new": list(self.new)}

    @classmethod
    def from_json(cls, d: Json) -> JobDecisionRecord:
        return cls(str(d["job_id"]), tuple(d["old"]), tuple(d["new"]), float(d["slowdown"]),
                   float(d["predicted_slowdown"]), bool(d["changed"]), str(d["explanation"]))


@dataclass(frozen=True)
class DecisionRecord:
    """A decision round, for "explain"."""

    policy: str
    decided_unix_s: float
    duration_s: float
    summary: str
    jobs: tuple[JobDecisionRecord, ...]

    def pack(self) -> Json:
        """The stored form: the plain fields, the jobs compressed."""
        raw = json.dumps([j.to_json() for j in self.jobs], separators=(",", ":")).encode()
        return {"policy": self.policy, "decided_unix_s": self.decided_unix_s, "duration_s": self.duration_s,
                "summary": self.summary, "jobs": [], _PACKED: base64.b64encode(zlib.compress(raw, 6)).decode("ascii")}

    @classmethod
    def unpack(cls, value: Json) -> DecisionRecord | None:
        """The record `pack` stored (a plain one, as earlier versions wrote it, too);
        None if it is corrupt or too large."""
        jobs = value.get("jobs", []) if _PACKED not in value else _inflate(value[_PACKED])
        try:
            return cls(str(value["policy"]), float(value["decided_unix_s"]), float(value["duration_s"]),
                       str(value["summary"]), tuple(JobDecisionRecord.from_json(j) for j in jobs))  # type: ignore[union-attr]
        except (KeyError, TypeError, ValueError, AttributeError):
            logger.warning("the stored decision record is corrupt or too large; ignoring it")
            return None


def _inflate(packed: object) -> list[Json] | None:
    try:
        inflate = zlib.decompressobj()
        raw = inflate.decompress(base64.b64decode(str(packed), validate=True), _MAX_RECORD)
        jobs = json.loads(raw) if not inflate.unconsumed_tail else None
    except (ValueError, zlib.error):  # binascii.Error and JSONDecodeError are ValueErrors
        return None
    return jobs if isinstance(jobs, list) else None
