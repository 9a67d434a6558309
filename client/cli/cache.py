"""`gpufair cache ls | prefetch URI | evict URI`: this node's cache service."""

from __future__ import annotations

import argparse

from gpufair.api.cache.v1 import cache_service_pb2 as pb
from gpufair.api.cache.v1 import cache_service_pb2_grpc as pb_grpc
from gpufair.client.cli.common import EXIT_OK, Endpoints, add_json_flag, fail, print_json, rpc, table, to_dict

_STATE = {pb.ENTRY_STATE_ABSENT: "absent", pb.ENTRY_STATE_FETCHING: "fetching", pb.ENTRY_STATE_CACHED: "cached", pb.ENTRY_STATE_FAILED: "failed"}


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f}"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache", help="list, prefetch or evict datasets in this node's cache")
    psub = p.add_subparsers(dest="action", required=True)
    ls = psub.add_parser("ls", help="datasets in this node's cache (--all-nodes: every node's, from etcd)")
    ls.add_argument("--all-nodes", action="store_true", help="read every node's cache records from etcd instead")
    add_json_flag(ls)
    ls.set_defaults(func=cache_ls)
    pf = psub.add_parser("prefetch", help="fetch a dataset (s3://bucket/key or s3://bucket/prefix/)")
    pf.add_argument("uri")
    pf.add_argument("--wait", type=float, default=0.0, help="wait up to this many seconds for it to be cached")
    pf.add_argument("--pin", default="", metavar="OWNER", help="pin it for OWNER until released")
    add_json_flag(pf)
    pf.set_defaults(func=cache_prefetch)
    ev = psub.add_parser("evict", help="remove a dataset from the cache")
    ev.add_argument("uri")
    ev.add_argument("--force", action="store_true", help="also evict a pinned dataset")
    add_json_flag(ev)
    ev.set_defaults(func=cache_evict)


def _stub(ep: Endpoints) -> pb_grpc.CacheServiceStub:
    return pb_grpc.CacheServiceStub(ep.channel(ep.cache))


def _all_nodes(ep: Endpoints) -> list[dict]:
    """Every node's cache records as the cache services mirror them in etcd."""
    import asyncio
    import os

    from gpufair.common.etcd import EtcdState

    root = os.environ.get("GPUFAIR_ETCD_ROOT", "/gpufair")

    async def read() -> list[dict]:
        state = EtcdState(ep.etcd, timeout=5)
        try:
            values, _ = await state.get_prefix(f"{root}/cache/")
        finally:
            await state.close()
        return [v.value for k, v in sorted(values.items()) if "/entries/" in k]

    return asyncio.run(read())


def cache_ls(args: argparse.Namespace) -> int:
    ep = Endpoints.from_env()
    if args.all_nodes:
        from gpufair.common.errors import Unavailable

        try:
            records = _all_nodes(ep)
        except Unavailable as exc:
            return fail(str(exc))
        if args.json:
            print_json(records)
        else:
            rows = [[r.get("node", "?"), r.get("uri", "?"), r.get("state", "?"), _mib(int(r.get("size") or 0)),
                     "yes" if r.get("pin_owners") else "", r.get("path") or r.get("reason") or ""] for r in records]
            print(table(["NODE", "URI", "STATE", "MIB", "PINNED", "PATH / REASON"], rows) if rows else "no cache records in etcd")
        return EXIT_OK
    res, code = rpc("cache ls", lambda: _stub(ep).ListEntries(pb.ListEntriesRequest(), metadata=ep.metadata, timeout=10))
    if code:
        return code
    if args.json:
        print_json(to_dict(res))
        return EXIT_OK
    rows = [[e.uri, _STATE.get(e.state, "?"), _mib(e.bytes_done), _mib(e.bytes_total), "yes" if e.pinned else "", e.local_path or e.error]
            for e in res.entries]
    print(table(["URI", "STATE", "MIB", "OF MIB", "PINNED", "PATH / ERROR"], rows) if rows else "cache is empty")
    print(f"used {_mib(res.used_bytes)} of {_mib(res.capacity_bytes)} MiB")
    return EXIT_OK


def cache_prefetch(args: argparse.Namespace) -> int:
    ep = Endpoints.from_env()
    stub = _stub(ep)
    res, code = rpc("prefetch", lambda: stub.Prefetch(pb.PrefetchRequest(uri=args.uri, pin_owner=args.pin), metadata=ep.metadata, timeout=10))
    if code:
        return code
    entry = res.entry
    if args.wait > 0:
        res2, code = rpc("resolve", lambda: stub.Resolve(pb.ResolveRequest(uri=args.uri, wait_s=args.wait), metadata=ep.metadata, timeout=args.wait + 10))
        if code:
            return code
        entry = res2.entry
    if args.json:
        print_json(to_dict(entry))
    else:
        print(f"{entry.uri}: {_STATE.get(entry.state, '?')} {_mib(entry.bytes_done)}/{_mib(entry.bytes_total)} MiB {entry.local_path or entry.error}")
    return EXIT_OK if entry.state != pb.ENTRY_STATE_FAILED else 1


def cache_evict(args: argparse.Namespace) -> int:
    ep = Endpoints.from_env()
    res, code = rpc("evict", lambda: _stub(ep).EvictEntry(pb.EvictEntryRequest(uri=args.uri, force=args.force), metadata=ep.metadata, timeout=10))
    if code:
        return code
    print_json(to_dict(res)) if args.json else print(f"{args.uri}: {'evicted, freed ' + _mib(res.freed_bytes) + ' MiB' if res.evicted else 'was not cached'}")
    return EXIT_OK
