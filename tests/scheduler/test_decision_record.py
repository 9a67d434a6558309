"""The decision record the leader stores for "explain": packed small enough for etcd."""

from __future__ import annotations

import json

from gpufair.scheduler.loop import pack_record, unpack_record
from gpufair.scheduler.policy import decide
from gpufair.scheduler.sim.synthetic import synthetic_cluster

_ETCD_REQUEST_LIMIT = 1536 * 1024  # etcd's default --max-request-bytes


def _record(n_jobs: int) -> dict:
    """A round's record as the loop builds it, from a real sd-maxmin decision
    on 200 jobs (repeated under new names past that)."""
    cluster = synthetic_cluster(min(n_jobs, 200), 800, seed=3)
    decisions = decide(cluster, "sd-maxmin")
    parts = [{"job_id": f"{j.job}-{i}", "old": list(j.split), "new": list(decisions[j.job].split),
              "slowdown": 1.5 + i / n_jobs,
              "predicted_slowdown": decisions[j.job].numbers.get("sd_at_lp_rate", 0.0),
              "changed": decisions[j.job].changed, "explanation": decisions[j.job].explanation}
             for i, j in zip(range(n_jobs), cluster.jobs * (n_jobs // len(cluster.jobs) + 1))]
    return {"policy": "sd-maxmin", "decided_unix_s": 1.0, "duration_s": 0.1, "summary": "s",
            "jobs": parts}


def test_packed_record_round_trips_and_fits_where_plain_json_does_not() -> None:
    record = _record(4000)
    packed = pack_record(record)
    assert unpack_record(json.loads(json.dumps(packed))) == record
    assert len(json.dumps(record).encode()) > _ETCD_REQUEST_LIMIT
    assert len(json.dumps(packed).encode()) < _ETCD_REQUEST_LIMIT / 3


def test_records_across_versions() -> None:
    record = _record(3)
    assert unpack_record(record) == record  # written by the previous version
    packed = pack_record(record)
    # The previous version reads a packed record as a round without jobs.
    assert packed["jobs"] == [] and packed["summary"] == record["summary"]


def test_a_corrupt_record_is_ignored_not_raised() -> None:
    packed = pack_record(_record(3))
    for bad in ("not base64!", packed["zlib_b64"][:-8], "eJwLycgsVgCiRIWS1OISAC0dBWQ="):
        assert unpack_record({**packed, "zlib_b64": bad}) is None
