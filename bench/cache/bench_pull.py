"""Pull throughput over a throttled link: gpufair's node-cache fetcher vs sequential `fget_object`.

    .venv/bin/python bench/cache/bench_pull.py [--large-mib 64] [--small 1000] [--small-kib 16]
        [--link-mbps 40] [--conn-mbps 10] [--rtt-ms 10] [--parts-mib 8] [--concurrency 8]

Starts its own S3 endpoint (moto server) and a throttling proxy in front of it;
both clients go through the same proxy in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from minio import Minio

from gpufair.cache.node import NodeCache, NodeCacheConfig
from gpufair.local import S3Server

sys.path.insert(0, str(Path(__file__).parent))
from throttle import ThrottleProxyProcess  # noqa: E402

MiB = 1024 * 1024


def upload(direct: Minio, bucket: str, large_mib: int, small: int, small_kib: int) -> None:
    direct.make_bucket(bucket)
    big = os.urandom(large_mib * MiB)
    direct.put_object(bucket, "large/blob.bin", io.BytesIO(big), len(big))
    blobs = [os.urandom(small_kib * 1024) for _ in range(min(small, 64))]

    def put(i: int) -> None:
        b = blobs[i % len(blobs)] + i.to_bytes(4, "big")  # distinct ETags
        direct.put_object(bucket, f"small/{i:05d}.bin", io.BytesIO(b), len(b))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(small)))


def sdk_sequential(client: Minio, bucket: str, prefix: str, dest: Path) -> float:
    t0 = time.perf_counter()
    for o in client.list_objects(bucket, prefix=prefix, recursive=True):
        client.fget_object(bucket, o.object_name, str(dest / o.object_name))
    return time.perf_counter() - t0


async def cache_pull(cfg: NodeCacheConfig, client: Minio, uri: str) -> float:
    cache = NodeCache(cfg, s3=client)
    await cache.start()
    try:
        t0 = time.perf_counter()
        st = await cache.resolve(uri, wait=True, timeout=600)
        assert st.state.value == "cached", st
        return time.perf_counter() - t0
    finally:
        await cache.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--large-mib", type=int, default=64)
    ap.add_argument("--small", type=int, default=1000)
    ap.add_argument("--small-kib", type=int, default=16)
    ap.add_argument("--link-mbps", type=float, default=40.0, help="shared link, MB/s")
    ap.add_argument("--conn-mbps", type=float, default=10.0, help="per TCP connection, MB/s")
    ap.add_argument("--rtt-ms", type=float, default=10.0)
    ap.add_argument("--parts-mib", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--only", choices=["large", "small"], help="run one of the two datasets")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="gpufair-bench-pull-"))
    server = S3Server().start()
    proxy: ThrottleProxyProcess | None = None
    try:
        direct = Minio(server.endpoint, access_key=server.access_key, secret_key=server.secret_key, secure=False)
        upload(direct, "bench", args.large_mib, args.small if args.only != "large" else 1, args.small_kib)
        proxy = ThrottleProxyProcess(server.endpoint, args.link_mbps * 1e6, args.conn_mbps * 1e6,
                                     args.rtt_ms / 1000)
        cfg = NodeCacheConfig(cache_dir=work / "cache", capacity_bytes=4 << 30, node="bench",
                              part_size=args.parts_mib * MiB, max_concurrency=args.concurrency,
                              s3_endpoint=proxy.endpoint)
        from gpufair.cache.node import make_client
        via_proxy = make_client(NodeCacheConfig(**{**cfg.__dict__, "s3_secret_key": server.secret_key,
                                                   "s3_access_key": server.access_key}))
        sdk = Minio(proxy.endpoint, access_key=server.access_key, secret_key=server.secret_key, secure=False)
        print(f"link {args.link_mbps} MB/s shared, {args.conn_mbps} MB/s per connection, RTT {args.rtt_ms} ms; "
              f"parts {args.parts_mib} MiB x {args.concurrency}")
        print(f"{'dataset':<28} {'fget_object (s)':>16} {'node cache (s)':>15} {'MB/s sdk':>9} {'MB/s cache':>11} {'speed-up':>9}")
        for label, prefix, uri, nbytes in (
            (f"1 x {args.large_mib} MiB object", "large/", "s3://bench/large/blob.bin", args.large_mib * MiB),
            (f"{args.small} x {args.small_kib} KiB objects", "small/", "s3://bench/small/",
             args.small * (args.small_kib * 1024 + 4)),
        ):
            if args.only and not prefix.startswith(args.only):
                continue
            base = sdk_sequential(sdk, "bench", prefix, work / "sdk")
            ours = asyncio.run(cache_pull(cfg, via_proxy, uri))
            shutil.rmtree(work / "cache", ignore_errors=True)
            print(f"{label:<28} {base:>16.2f} {ours:>15.2f} {nbytes / base / 1e6:>9.1f} "
                  f"{nbytes / ours / 1e6:>11.1f} {base / ours:>8.1f}x")
    finally:
        if proxy:
            proxy.stop()
        server.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
