"""The cache service over real gRPC, with a real S3 endpoint and real etcd."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
import uuid
from pathlib import Path

import grpc
import pytest

from gpufair.api.cache.v1 import cache_service_pb2 as pb
from gpufair.api.cache.v1 import cache_service_pb2_grpc as pb_grpc
from gpufair.cache.app import CacheNode, start_node
from gpufair.cache.node.config import NodeCacheConfig
from gpufair.common.config import CommonConfig
from gpufair.common.etcd import EtcdState
from gpufair.common.keys import Keys

PIPELINE = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {{generateName: train-pipeline-}}
spec:
  entrypoint: main
  templates:
  - name: main
    dag:
      tasks:
      - {{name: preprocess, template: prep}}
      - {{name: train, template: train, dependencies: [preprocess]}}
  - name: prep
    container: {{image: python:3.11, args: ["--data", "s3://{bucket}/raw/"]}}
  - name: train
    container:
      image: trainer:1
      args: ["--data", "s3://{bucket}/train.bin"]
      resources: {{limits: {{nvidia.com/gpu: 2}}}}
"""


async def _start(tmp_path: Path, s3_server, etcd_endpoint: str, etcd_root: str, name: str) -> CacheNode:
    cfg = NodeCacheConfig(cache_dir=tmp_path / name, capacity_bytes=8 << 20, node=name, s3_endpoint=s3_server.endpoint,
                          s3_access_key=s3_server.access_key, s3_secret_key=s3_server.secret_key)
    return await start_node(CommonConfig(listen="127.0.0.1:0", etcd=etcd_endpoint, etcd_root=etcd_root), cfg)


@pytest.fixture
async def cache_node(tmp_path: Path, s3_server, etcd_endpoint: str, etcd_root: str):
    n = await _start(tmp_path, s3_server, etcd_endpoint, etcd_root, "node-a")
    yield n
    await n.close()


@pytest.fixture
async def node(cache_node: CacheNode):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{cache_node.server.port}") as ch:
        yield pb_grpc.CacheServiceStub(ch)


def _cli(cache_node: CacheNode, *args: str) -> subprocess.CompletedProcess[str]:
    """The `gpufair` CLI against this node's cache service, with no way to reach etcd."""
    env = {"GPUFAIR_CACHE_ADDR": f"127.0.0.1:{cache_node.server.port}", "GPUFAIR_ETCD": "127.0.0.1:1", "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "gpufair.client.cli", *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def bucket(s3_client) -> str:
    name = f"data-{uuid.uuid4().hex[:8]}"
    s3_client.make_bucket(name)
    s3_client.put_object(name, "train.bin", io.BytesIO(b"x" * 300_000), 300_000)
    for i in range(3):
        s3_client.put_object(name, f"raw/part-{i}.csv", io.BytesIO(b"a,b\n" * (i + 1)), 4 * (i + 1))
    return name


async def test_prefetch_resolve_list_read_and_evict(node, bucket: str) -> None:
    uri = f"s3://{bucket}/train.bin"
    await node.Prefetch(pb.PrefetchRequest(uri=uri))
    res = (await node.Resolve(pb.ResolveRequest(uri=uri, wait_s=30))).entry
    assert res.state == pb.ENTRY_STATE_CACHED and Path(res.local_path).read_bytes() == b"x" * 300_000
    assert res.bytes_total == 300_000 and res.node == "node-a"
    chunks = [c async for c in node.ReadObject(pb.ReadObjectRequest(uri=uri))]
    assert b"".join(c.data for c in chunks) == b"x" * 300_000
    listing = await node.ListEntries(pb.ListEntriesRequest())
    assert [e.uri for e in listing.entries] == [uri] and listing.used_bytes >= 300_000
    ev = await node.EvictEntry(pb.EvictEntryRequest(uri=uri))
    assert ev.evicted and ev.freed_bytes == 300_000 and not Path(res.local_path).exists()


async def test_bad_uris_and_arguments_get_clear_statuses(node) -> None:
    for uri, code in [("gs://b/k", grpc.StatusCode.FAILED_PRECONDITION), ("ftp://x", grpc.StatusCode.FAILED_PRECONDITION),
                      ("ftp2://x/k", grpc.StatusCode.INVALID_ARGUMENT), ("s3://Bad_Bucket/k", grpc.StatusCode.INVALID_ARGUMENT),
                      ("s3://no-such-bucket-zz/k", grpc.StatusCode.NOT_FOUND)]:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await node.Resolve(pb.ResolveRequest(uri=uri, wait_s=5))
        assert err.value.code() == code, (uri, err.value.details())
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await node.Resolve(pb.ResolveRequest(uri="s3://b/k", wait_s=-1))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_submitted_pipeline_is_planned_pinned_prefetched_and_stored(node, bucket: str, etcd_endpoint: str, etcd_root: str) -> None:
    res = await node.SubmitPipeline(pb.SubmitPipelineRequest(yaml=PIPELINE.format(bucket=bucket), source="p.yaml", run_id="run-1",
                                                             start_prefetch=True))
    plan = res.plan
    assert plan.format.startswith("argo") and [s.name for s in plan.steps] == ["preprocess", "train"]
    train = plan.steps[1]
    assert train.gpus == 2 and list(train.depends_on) == ["preprocess"] and train.predicted_start_s > 0
    sizes = {d.uri: d.size_bytes for d in plan.datasets}
    assert sizes == {f"s3://{bucket}/raw/": 4 + 8 + 12, f"s3://{bucket}/train.bin": 300_000}
    for d in plan.datasets:
        entry = (await node.Resolve(pb.ResolveRequest(uri=d.uri, wait_s=30))).entry
        assert entry.state == pb.ENTRY_STATE_CACHED and entry.pinned
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await node.EvictEntry(pb.EvictEntryRequest(uri=f"s3://{bucket}/train.bin"))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "pinned" in err.value.details()
    assert (await node.GetPlan(pb.GetPlanRequest(run_id="run-1"))).plan.run_id == "run-1"
    state = EtcdState(etcd_endpoint)
    try:
        stored = await state.get(Keys(etcd_root).pipeline_plan("run-1"))
        assert stored is not None and {s["name"] for s in stored.value["plan"]["steps"]} == {"preprocess", "train"}
    finally:
        await state.close()


async def test_malformed_pipeline_is_invalid_argument_with_location(node) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await node.SubmitPipeline(pb.SubmitPipelineRequest(yaml="kind: Workflow\nspec: [1, 2\n", source="bad.yaml"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "bad.yaml" in err.value.details()


async def test_recorded_step_durations_drive_the_predicted_starts(cache_node: CacheNode, node, bucket: str) -> None:
    from gpufair.cache.planner import parse_pipeline

    text = PIPELINE.format(bucket=bucket)
    name = parse_pipeline(text).name
    for seconds in ("200", "240", "220"):  # the median, 220 s, is what the planner should use
        done = await asyncio.to_thread(_cli, cache_node, "steps", "record", name, "preprocess", seconds)
        assert done.returncode == 0, done.stderr
    bad = await asyncio.to_thread(_cli, cache_node, "steps", "record", name, "preprocess", "-5")
    assert bad.returncode == 2 and "expected seconds from 0 to 2,592,000" in bad.stderr  # refused before it is sent
    plan = (await node.SubmitPipeline(pb.SubmitPipelineRequest(yaml=text, source="p.yaml", run_id="run-2"))).plan
    starts = {s.name: s.predicted_start_s for s in plan.steps}
    assert starts["train"] == pytest.approx(220.0)


async def test_a_run_id_is_submitted_once(node, bucket: str) -> None:
    req = pb.SubmitPipelineRequest(yaml=PIPELINE.format(bucket=bucket), source="p.yaml", run_id="run-3")
    await node.SubmitPipeline(req)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await node.SubmitPipeline(req)
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    ids = {(await node.SubmitPipeline(pb.SubmitPipelineRequest(yaml=req.yaml))).plan.run_id for _ in range(2)}
    assert len(ids) == 2  # generated ids never collide


async def test_cache_ls_all_nodes_lists_every_nodes_entries_through_one_service(
        tmp_path: Path, s3_server, etcd_endpoint: str, etcd_root: str, cache_node: CacheNode, node, bucket: str) -> None:
    uri = f"s3://{bucket}/train.bin"
    other = await _start(tmp_path, s3_server, etcd_endpoint, etcd_root, "node-b")
    try:
        for n in (cache_node, other):
            assert (await n.cache.resolve(uri, wait=True, timeout=30)).state.value == "cached"
            await n.cache.flush_published()  # each node mirrors its entries in the background
        done = await asyncio.to_thread(_cli, cache_node, "cache", "ls", "--all-nodes", "--json")
        assert done.returncode == 0, done.stderr
        entries = json.loads(done.stdout)
        assert [(e["node"], e["uri"], e["state"], e["bytes_total"]) for e in entries] == \
            [(name, uri, "ENTRY_STATE_CACHED", "300000") for name in ("node-a", "node-b")]
        table = await asyncio.to_thread(_cli, cache_node, "cache", "ls", "--all-nodes")
        assert "node-b" in table.stdout and "0.3" in table.stdout
    finally:
        await other.close()


async def test_a_dataset_the_cache_refuses_is_reported_and_skipped_never_half_pinned(node, bucket: str) -> None:
    # s3n:// is in the one scheme table; a two-letter bucket name fails the cache's own check.
    text = PIPELINE.format(bucket=bucket).replace(f"s3://{bucket}/raw/", "s3://xy/raw/").replace("s3://", "s3n://")
    plan = (await node.SubmitPipeline(pb.SubmitPipelineRequest(yaml=text, source="p.yaml", run_id="run-4",
                                                               start_prefetch=True))).plan
    by_uri = {d.uri: d for d in plan.datasets}
    refused, taken = by_uri["s3n://xy/raw/"], by_uri[f"s3n://{bucket}/train.bin"]
    assert not refused.fetchable and "refused by the cache" in refused.note and "invalid bucket" in refused.note
    assert taken.fetchable and taken.entry.pinned
    listing = await node.ListEntries(pb.ListEntriesRequest())
    assert {e.uri for e in listing.entries if e.pinned} == {f"s3://{bucket}/train.bin"}  # s3n folded into s3
