"""The test fixtures start real servers that real clients can use."""

import uuid

import aetcd


async def test_etcd_fixture_serves_real_etcd(etcd_endpoint: str, etcd_root: str) -> None:
    host, port = etcd_endpoint.split(":")
    async with aetcd.Client(host=host, port=int(port)) as client:
        key = f"{etcd_root}/probe".encode()
        await client.put(key, b"v1")
        got = await client.get(key)
        assert got is not None and got.value == b"v1"


def test_s3_fixture_round_trips_an_object_with_minio(s3_client) -> None:
    import io

    bucket = f"probe-{uuid.uuid4().hex[:8]}"
    s3_client.make_bucket(bucket)
    s3_client.put_object(bucket, "a/b.bin", io.BytesIO(b"hello"), 5)
    assert s3_client.get_object(bucket, "a/b.bin").read() == b"hello"
    assert [o.object_name for o in s3_client.list_objects(bucket, recursive=True)] == ["a/b.bin"]
