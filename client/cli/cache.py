"""`gpufair cache ls | prefetch URI | evict URI`: this node's cache service."""

from __future__ import annotations

import argparse

from gpufair.api.cache.v1 import cache_service_pb2 as pb
from gpufair.client.cli.common import (EXIT_FAIL, EXIT_OK, add_json_flag, call, call_and_render, in_range, print_json, table,
                                       to_dict)
from gpufair.common.limits import MAX_WAIT_S

_STATE = {pb.ENTRY_STATE_ABSENT: "absent", pb.ENTRY_STATE_FETCHING: "fetching", pb.ENTRY_STATE_CACHED: "cached", pb.ENTRY_STATE_FAILED: "failed"}


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f}"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache", help="list, prefetch or evict datasets in this node's cache")
    psub = p.add_subparsers(dest="action", required=True)
    ls = psub.add_parser("ls", help="datasets in this node's cache (--all-nodes: every node's)")
    ls.add_argument("--all-nodes", action="store_true", help="every node's cached datasets, as the cache services mirror them")
    add_json_flag(ls)
    ls.set_defaults(func=cache_ls)
    pf = psub.add_parser("prefetch", help="fetch a dataset (s3://bucket/key or s3://bucket/prefix/)")
    pf.add_argument("uri")
    pf.add_argument("--wait", type=in_range(float, 0, MAX_WAIT_S, "seconds"), default=0.0,
                    help="wait up to this many seconds for it to be cached")
    pf.add_argument("--pin", default="", metavar="OWNER", help="pin it for OWNER until released")
    add_json_flag(pf)
    pf.set_defaults(func=cache_prefetch)
    ev = psub.add_parser("evict", help="remove a dataset from the cache")
    ev.add_argument("uri")
    ev.add_argument("--force", action="store_true", help="also evict a pinned dataset")
    add_json_flag(ev)
    ev.set_defaults(func=cache_evict)


def _entry_line(e: pb.Entry) -> str:
    return f"{e.uri}: {_STATE.get(e.state, '?')} {_mib(e.bytes_done)}/{_mib(e.bytes_total)} MiB {e.local_path or e.error}"


def cache_ls(args: argparse.Namespace) -> int:
    if args.all_nodes:
        def render_all(res: pb.ListClusterEntriesResponse) -> None:
            rows = [[e.node, e.uri, _STATE.get(e.state, "?"), _mib(e.bytes_total), "yes" if e.pinned else "", e.local_path or e.error]
                    for e in res.entries]
            print(table(["NODE", "URI", "STATE", "MIB", "PINNED", "PATH / REASON"], rows) if rows else "no cache records on any node")

        return call_and_render(args, "cache ls --all-nodes", "cache", "ListClusterEntries", pb.ListClusterEntriesRequest(),
                               render_all, as_json=lambda res: [to_dict(e) for e in res.entries])

    def render(res: pb.ListEntriesResponse) -> None:
        rows = [[e.uri, _STATE.get(e.state, "?"), _mib(e.bytes_done), _mib(e.bytes_total), "yes" if e.pinned else "", e.local_path or e.error]
                for e in res.entries]
        print(table(["URI", "STATE", "MIB", "OF MIB", "PINNED", "PATH / ERROR"], rows) if rows else "cache is empty")
        print(f"used {_mib(res.used_bytes)} of {_mib(res.capacity_bytes)} MiB")

    return call_and_render(args, "cache ls", "cache", "ListEntries", pb.ListEntriesRequest(), render)


def cache_prefetch(args: argparse.Namespace) -> int:
    res, code = call("prefetch", "cache", "Prefetch", pb.PrefetchRequest(uri=args.uri, pin_owner=args.pin))
    if code:
        return code
    entry = res.entry
    if args.wait > 0:
        resolved, code = call("resolve", "cache", "Resolve", pb.ResolveRequest(uri=args.uri, wait_s=args.wait), timeout=args.wait + 10)
        if code:
            return code
        entry = resolved.entry
    if args.json:
        print_json(to_dict(entry))
    else:
        print(_entry_line(entry))
    return EXIT_OK if entry.state != pb.ENTRY_STATE_FAILED else EXIT_FAIL


def cache_evict(args: argparse.Namespace) -> int:
    def render(res: pb.EvictEntryResponse) -> None:
        print(f"{args.uri}: {'evicted, freed ' + _mib(res.freed_bytes) + ' MiB' if res.evicted else 'was not cached'}")

    return call_and_render(args, "evict", "cache", "EvictEntry", pb.EvictEntryRequest(uri=args.uri, force=args.force), render)
