"""`gpufair pipeline submit FILE | ls | get RUN`: pipeline runs on this node's cache
service (SubmitPipeline plans a Kubeflow pipeline and starts its prefetches;
`gpufair plan FILE` is the offline look at a plan)."""

from __future__ import annotations

import argparse
import time

from gpufair.api.cache.v1 import cache_service_pb2 as pb
from gpufair.client.cli.common import EXIT_USAGE, add_json_flag, call_and_render, fail, table, to_dict
from gpufair.client.cli.plan import parse_params

_STATE = {pb.ENTRY_STATE_ABSENT: "absent", pb.ENTRY_STATE_FETCHING: "fetching", pb.ENTRY_STATE_CACHED: "cached",
          pb.ENTRY_STATE_FAILED: "failed"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pipeline", help="submit a Kubeflow pipeline to this node's cache, list or show its runs")
    psub = p.add_subparsers(dest="action", required=True)
    s = psub.add_parser("submit", help="plan a pipeline (Argo Workflow or KFP v2 IR YAML) and start its prefetches")
    s.add_argument("file", help="pipeline YAML ('-' for stdin)")
    s.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE", help="pipeline parameter (repeatable)")
    s.add_argument("--run-id", default="", help="name the run (default: from the pipeline's name)")
    s.add_argument("--plan-only", action="store_true", help="plan, but start no prefetch")
    add_json_flag(s)
    s.set_defaults(func=submit)
    ls = psub.add_parser("ls", help="this node's pipeline runs")
    add_json_flag(ls)
    ls.set_defaults(func=list_runs)
    g = psub.add_parser("get", help="one run's plan with each dataset's cache state")
    g.add_argument("run_id")
    add_json_flag(g)
    g.set_defaults(func=get)


def _read(path: str) -> str:
    import sys

    data = sys.stdin.buffer.read() if path == "-" else open(path, "rb").read()  # noqa: SIM115 - one read
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text; submit the pipeline's YAML (gpufair plan reads packages offline)") from None


def _render_plan(plan: pb.Plan) -> None:
    print(f"run {plan.run_id}: pipeline {plan.pipeline_name or '-'} ({plan.format})")
    print(table(["STEP", "START", "DUR", "GPUS", "DATASETS"],
                [[s.name, f"{s.predicted_start_s:,.0f}s", f"{s.predicted_duration_s:,.0f}s", s.gpus or "-", len(s.datasets)]
                 for s in plan.steps]))
    print()
    rows = [[d.uri, f"{d.prefetch_start_s:,.0f}s", f"{d.deadline_s:,.0f}s", _STATE.get(d.entry.state, "-") if d.fetchable else "-",
             d.note or "-"] for d in plan.datasets]
    print(table(["DATASET", "PREFETCH AT", "NEEDED AT", "CACHE", "NOTE"], rows) if rows else "no datasets")
    for u in plan.unresolved:
        print(f"unresolved: {u}")


def submit(args: argparse.Namespace) -> int:
    try:
        params, text = parse_params(args.param), _read(args.file)
    except (OSError, ValueError) as exc:
        return fail(str(exc), EXIT_USAGE)
    req = pb.SubmitPipelineRequest(yaml=text, source=args.file, run_id=args.run_id, start_prefetch=not args.plan_only,
                                   parameters=params)
    return call_and_render(args, "pipeline submit", "cache", "SubmitPipeline", req, lambda res: _render_plan(res.plan),
                           timeout=60)


def list_runs(args: argparse.Namespace) -> int:
    def render(res: pb.ListPipelinesResponse) -> None:
        rows = [[r.run_id, r.pipeline_name or "-", time.strftime("%H:%M:%S", time.localtime(r.started_unix_s)),
                 f"{r.makespan_s:,.0f}s", f"{r.cached}/{r.datasets}"] for r in res.runs]
        print(table(["RUN", "PIPELINE", "SUBMITTED", "MAKESPAN", "CACHED"], rows) if rows else "no pipeline runs on this node")

    return call_and_render(args, "pipeline ls", "cache", "ListPipelines", pb.ListPipelinesRequest(), render,
                           as_json=lambda res: [to_dict(r) for r in res.runs])


def get(args: argparse.Namespace) -> int:
    return call_and_render(args, f"pipeline get {args.run_id}", "cache", "GetPlan", pb.GetPlanRequest(run_id=args.run_id),
                           lambda res: _render_plan(res.plan))
