"""`gpufair plan FILE`: the prefetch plan of a Kubeflow pipeline, offline."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from gpufair.client.cli.common import EXIT_OK, EXIT_USAGE
from gpufair.common.errors import GpufairError

#: Megabytes per second assumed when --bandwidth is not given.
DEFAULT_BANDWIDTH_MBPS = 100.0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `plan` subcommand."""
    p = subparsers.add_parser(
        "plan", help="show which step reads which dataset, and when to prefetch it",
        description="Parse a Kubeflow pipeline (Argo Workflow or KFP v2 IR YAML) and print "
        "its steps, datasets, predicted start times and prefetch schedule. Works offline.",
    )
    p.add_argument("file", help="pipeline YAML file ('-' for stdin)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--bandwidth", type=float, default=DEFAULT_BANDWIDTH_MBPS, metavar="MBPS",
                   help=f"link bandwidth in megabytes/s (default {DEFAULT_BANDWIDTH_MBPS:g})")
    p.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE",
                   help="pipeline parameter value (repeatable), overriding defaults")
    p.add_argument("--sizes", metavar="JSON", help='JSON file {"uri": bytes} with dataset sizes')
    p.add_argument("--durations", metavar="JSON", help='JSON file {"step": [seconds, ...]} of past runs')
    p.set_defaults(func=run)


def _error(message: str) -> int:
    print(f"gpufair plan: {message}", file=sys.stderr)
    return EXIT_USAGE


def _read(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    with open(path, "rb") as f:
        return f.read()


def _json_file(path: str | None, what: str) -> dict[str, Any]:
    if path is None:
        return {}
    with open(path, encoding="utf-8") as f:
        value = json.load(f)
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a JSON object of {what}")
    return value


def parse_params(pairs: list[str]) -> dict[str, str]:
    """`--param NAME=VALUE` options as a dict (ValueError naming a malformed one)."""
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--param {pair!r}: expected NAME=VALUE")
        out[name] = value
    return out


def run(args: argparse.Namespace) -> int:
    """Run `gpufair plan`; returns the exit code (2 on bad input)."""
    # The planner is pure and works offline from the file alone; imported when
    # the command runs, so the CLI's entry module loads no service code.
    from gpufair.cache.planner import parse_pipeline, plan

    source = "<stdin>" if args.file == "-" else args.file
    try:
        if not (args.bandwidth > 0 and args.bandwidth < float("inf")):
            return _error(f"--bandwidth must be a positive number of MB/s, got {args.bandwidth}")
        params = parse_params(args.param)
        sizes = _json_file(args.sizes, "dataset sizes")
        durations = _json_file(args.durations, "step durations")
        text = _read(args.file)
    except OSError as exc:
        return _error(f"cannot read {exc.filename or source}: {exc.strerror or exc}")
    except ValueError as exc:
        return _error(str(exc))
    try:
        pipeline = parse_pipeline(text, source, parameters=params)
        result = plan(pipeline, durations=durations, sizes=sizes, bandwidth_bytes_per_s=args.bandwidth * 1e6)
    except GpufairError as exc:
        return _error(str(exc))
    doc = result.to_json()
    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_plan(doc, sys.stdout)
    return EXIT_OK


def _t(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:,.0f}s"


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1000  # type: ignore[assignment]
    return str(n)


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() + "\n")


def print_plan(doc: dict[str, Any], out: TextIO) -> None:
    """Readable tables of a plan's JSON form."""
    out.write(f"pipeline {doc['name']} ({doc['format']}), predicted makespan {_t(doc['makespan_s'])}\n\n")
    rows = [["STEP", "KIND", "START", "DUR", "GPUS", "DEPENDS ON", "NOTES"]]
    for s in doc["steps"]:
        notes = [n for n in (s["loop"], "conditional" if s["conditional"] else None,
                             f"{len(s['datasets'])} dataset(s)" if s["datasets"] else None,
                             *s["node_hints"]) if n]
        gpus = f"{s['gpus']}" + (f" {s['accelerator']}" if s["accelerator"] else "") if s["gpus"] else "-"
        rows.append([s["name"], s["kind"], _t(s["predicted_start_s"]), _t(s["duration_s"]), gpus,
                     ",".join(s["depends_on"]) or "-", "; ".join(notes)])
    _table(rows, out)
    out.write("\n")
    if doc["datasets"]:
        rows = [["DATASET", "SIZE", "STATUS", "PREFETCH", "NEEDED BY", "CONSUMERS"]]
        for d in doc["datasets"]:
            status = d["status"] if d["fetchable"] else f"not fetchable: {d['reason']}"
            rows.append([d["uri"], _size(d["size_bytes"]), status, _t(d["prefetch_start_s"]),
                         _t(d["deadline_s"]), ",".join(d["consumers"]) or "-"])
        _table(rows, out)
    else:
        out.write("no dataset URIs found\n")
    if doc["unresolved"]:
        out.write("\ncould not resolve:\n")
        for u in doc["unresolved"]:
            step = f"[{u['step']}] " if u["step"] else ""
            out.write(f"  - {step}{u['where']}: {u['reason']}\n")
