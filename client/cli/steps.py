"""`gpufair steps record PIPELINE STEP SECONDS`: teach the planner how long a step takes.

Call it from a Kubeflow exit handler (or by hand): the cache service's planner
predicts step starts from the median of the last recorded runs, and falls back
to documented defaults (60 s per container step) without them.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from gpufair.client.cli.common import EXIT_FAIL, EXIT_OK, EXIT_USAGE, Endpoints, add_json_flag, fail, print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("steps", help="record observed pipeline step durations for the planner")
    psub = p.add_subparsers(dest="action", required=True)
    rec = psub.add_parser("record", help="add one observed duration of a pipeline step")
    rec.add_argument("pipeline", help="the pipeline's name (as `gpufair plan` prints it)")
    rec.add_argument("step", help="the step's name, e.g. train or condition-1/train-2")
    rec.add_argument("seconds", type=float, help="how long the step ran")
    add_json_flag(rec)
    rec.set_defaults(func=record)


def record(args: argparse.Namespace) -> int:
    from gpufair.cache.history import record_duration
    from gpufair.cache.planner.model import Step
    from gpufair.common.errors import GpufairError, Unavailable
    from gpufair.common.etcd import EtcdState
    from gpufair.common.keys import Keys

    step_key = Step(name=args.step, kind="container", template="").history_key(args.pipeline)

    async def run() -> list[float]:
        state = EtcdState(Endpoints.from_env().etcd, timeout=5)
        try:
            return await record_duration(state, Keys(os.environ.get("GPUFAIR_ETCD_ROOT", "/gpufair")), step_key, args.seconds)
        finally:
            await state.close()

    try:
        values = asyncio.run(run())
    except Unavailable as exc:
        return fail(str(exc), EXIT_FAIL)
    except GpufairError as exc:
        return fail(str(exc), EXIT_USAGE)
    if args.json:
        print_json({"step_key": step_key, "seconds": values})
    else:
        print(f"{step_key}: {len(values)} run(s) recorded, median {sorted(values)[len(values) // 2]:.1f}s")
    return EXIT_OK
