"""`gpufair steps record PIPELINE STEP SECONDS`: teach the planner how long a step takes.

Call it from a Kubeflow exit handler (or by hand): the cache service's planner
predicts step starts from the median of the last recorded runs, and falls back
to documented defaults (60 s per container step) without them. It goes through
the cache service (RecordStepDuration), which needs the admin token.
"""

from __future__ import annotations

import argparse

from gpufair.api.cache.v1 import cache_service_pb2 as pb
from gpufair.client.cli.common import add_json_flag, call_and_render, in_range


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("steps", help="record observed pipeline step durations for the planner")
    psub = p.add_subparsers(dest="action", required=True)
    rec = psub.add_parser("record", help="add one observed duration of a pipeline step")
    rec.add_argument("pipeline", help="the pipeline's name (as `gpufair plan` prints it)")
    rec.add_argument("step", help="the step's name, e.g. train or condition-1/train-2")
    rec.add_argument("seconds", type=in_range(float, 0, 30 * 86400, "seconds"), help="how long the step ran (up to 30 days)")
    add_json_flag(rec)
    rec.set_defaults(func=record)


def record(args: argparse.Namespace) -> int:
    def render(res: pb.RecordStepDurationResponse) -> None:
        values = sorted(res.seconds)
        print(f"{res.step_key}: {len(values)} run(s) recorded, median {values[len(values) // 2]:.1f}s")

    req = pb.RecordStepDurationRequest(pipeline=args.pipeline, step=args.step, seconds=args.seconds)
    return call_and_render(args, "record step duration", "cache", "RecordStepDuration", req, render,
                           as_json=lambda res: {"step_key": res.step_key, "seconds": list(res.seconds)})
