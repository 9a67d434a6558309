"""Dataset URIs and safe local paths: the one table the cache, the planner and trainers share."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from gpufair.cache.planner.uris import classify
from gpufair.common.errors import FailedPrecondition, GpufairError, InvalidArgument
from gpufair.common.keys import check_segment
from gpufair.common.paths import safe_join
from gpufair.common.uris import FETCHABLE_SCHEMES, UNFETCHABLE_REASONS, parse_dataset_uri


def test_uris_parse_objects_prefixes_and_fold_minio_into_s3():
    obj = parse_dataset_uri("minio://my-bucket/a/b.tar")
    assert (obj.bucket, obj.key, obj.is_prefix, obj.canonical) == ("my-bucket", "a/b.tar", False, "s3://my-bucket/a/b.tar")
    assert obj.entry_id == parse_dataset_uri("s3://my-bucket/a/b.tar").entry_id
    assert parse_dataset_uri("s3a://my-bucket/a/b.tar").entry_id == obj.entry_id
    assert parse_dataset_uri("s3://my-bucket/a/").is_prefix and parse_dataset_uri("s3://my-bucket").is_prefix


@pytest.mark.parametrize("uri, err, words", [
    ("gs://bkt/x", FailedPrecondition, "cannot fetch gs://"),
    ("hdfs://bkt/x", FailedPrecondition, "cannot fetch hdfs://"),
    ("ftp2://bkt/x", InvalidArgument, "unknown scheme"),
    ("bkt/x", InvalidArgument, "no scheme"),
    ("", InvalidArgument, "empty"),
    ("s3://Bad_Bucket/x", InvalidArgument, "invalid bucket"),
    ("s3://bkt/../etc/passwd", InvalidArgument, "'..'"),
    ("s3://bkt//abs", InvalidArgument, "must not start"),
    ("s3://bkt/a\x00b", InvalidArgument, "control characters"),
    ("s3://bkt/" + "x" * 3000, InvalidArgument, "limit"),
])
def test_bad_uris_get_a_clear_error(uri, err, words):
    with pytest.raises(err, match=words):
        parse_dataset_uri(uri)


@settings(max_examples=300, deadline=None)
@given(hs.text(max_size=80))
def test_any_string_parses_or_fails_cleanly_and_ids_are_safe_key_segments(text):
    for candidate in (text, "s3://bkt/" + text, "s3://" + text):
        try:
            ds = parse_dataset_uri(candidate)
        except GpufairError:
            continue
        assert check_segment("entry", ds.entry_id) == ds.entry_id
        assert ".." not in ds.key.split("/")


@pytest.mark.parametrize("rel", ["../x", "a/../../x", "/etc/passwd", "", "a//b", "./a"])
def test_safe_join_refuses_escapes(tmp_path, rel):
    with pytest.raises(InvalidArgument, match="escape"):
        safe_join(tmp_path, rel)
    assert safe_join(tmp_path, "a/b.bin") == tmp_path / "a" / "b.bin"


@pytest.mark.parametrize("scheme", sorted(FETCHABLE_SCHEMES))
def test_every_fetchable_scheme_folds_into_one_cache_entry(scheme):
    assert parse_dataset_uri(f"{scheme}://my-bucket/a/b.tar").entry_id == parse_dataset_uri("s3://my-bucket/a/b.tar").entry_id


@pytest.mark.parametrize("scheme", sorted(FETCHABLE_SCHEMES | set(UNFETCHABLE_REASONS)))
def test_the_planner_and_the_cache_read_one_scheme_table(scheme):
    uri = f"{scheme}://my-bucket/data/"
    fetchable, reason = classify(uri)
    try:
        parse_dataset_uri(uri)
        accepted, why = True, ""
    except GpufairError as exc:
        accepted, why = False, str(exc)
    assert fetchable == accepted
    assert fetchable or (reason and reason in why)  # the same reason, from the same table


def test_known_unfetchable_schemes_are_a_failed_precondition_with_the_reason():
    for scheme, reason in UNFETCHABLE_REASONS.items():
        with pytest.raises(FailedPrecondition, match=reason.split(":")[0]):
            parse_dataset_uri(f"{scheme}://my-bucket/x")
