"""The decision record the leader stores for "explain": typed, packed small enough for etcd."""

from __future__ import annotations

import json

from gpufair.scheduler.decisions import DecisionRecord, JobDecisionRecord
from gpufair.scheduler.policy import decide
from gpufair.scheduler.sim.synthetic import synthetic_cluster

_ETCD_REQUEST_LIMIT = 1536 * 1024  # etcd's default --max-request-bytes


def _record(n_jobs: int) -> DecisionRecord:
    """A round's record as the loop builds it, from a real sd-maxmin decision
    on 200 jobs (repeated under new names past that)."""
    cluster = synthetic_cluster(min(n_jobs, 200), 800, seed=3)
    decisions = decide(cluster, "sd-maxmin")
    parts = tuple(JobDecisionRecord(f"{j.job}-{i}", tuple(j.split), tuple(decisions[j.job].split), 1.5 + i / n_jobs,
                                    decisions[j.job].numbers.get("sd_at_lp_rate", 0.0), decisions[j.job].changed,
                                    decisions[j.job].explanation)
                  for i, j in zip(range(n_jobs), cluster.jobs * (n_jobs // len(cluster.jobs) + 1)))
    return DecisionRecord("sd-maxmin", 1.0, 0.1, "s", parts)


def _plain(record: DecisionRecord) -> dict:
    """The record as an earlier version stored it: plain JSON, jobs inline."""
    return {"policy": record.policy, "decided_unix_s": record.decided_unix_s, "duration_s": record.duration_s,
            "summary": record.summary, "jobs": [j.to_json() for j in record.jobs]}


def test_packed_record_round_trips_and_fits_where_plain_json_does_not() -> None:
    record = _record(4000)
    packed = record.pack()
    assert DecisionRecord.unpack(json.loads(json.dumps(packed))) == record
    assert len(json.dumps(_plain(record)).encode()) > _ETCD_REQUEST_LIMIT
    assert len(json.dumps(packed).encode()) < _ETCD_REQUEST_LIMIT / 3


def test_records_across_versions() -> None:
    record = _record(3)
    assert DecisionRecord.unpack(json.loads(json.dumps(_plain(record)))) == record  # written by an earlier version
    packed = record.pack()
    # An earlier version reads a packed record as a round without jobs.
    assert packed["jobs"] == [] and packed["summary"] == record.summary


def test_a_corrupt_record_is_ignored_not_raised() -> None:
    packed = _record(3).pack()
    for bad in ("not base64!", packed["zlib_b64"][:-8], "eJwLycgsVgCiRIWS1OISAC0dBWQ="):
        assert DecisionRecord.unpack({**packed, "zlib_b64": bad}) is None
    assert DecisionRecord.unpack({"policy": "even"}) is None  # fields missing
