"""`gpufair jobs | job ID | policy get/set | split pin/release`: the scheduler's admin RPCs."""

from __future__ import annotations

import argparse

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.client.cli.common import EXIT_USAGE, add_json_flag, call_and_render, fail, fmt, table, to_dict

_STATE = {pb.JOB_STATE_PENDING: "pending", pb.JOB_STATE_RUNNING: "running", pb.JOB_STATE_FINISHED: "finished"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("jobs", help="list jobs: ranks, split, rate, slow-down, exclusive rate")
    p.add_argument("--all", action="store_true", help="include finished jobs")
    add_json_flag(p)
    p.set_defaults(func=jobs)

    p = sub.add_parser("job", help="one job with its history of splits and slow-downs")
    p.add_argument("job_id")
    p.add_argument("--limit", type=int, default=20, help="history entries (default 20)")
    add_json_flag(p)
    p.set_defaults(func=job)

    p = sub.add_parser("policy", help="show or change the scheduling policy")
    psub = p.add_subparsers(dest="action", required=True)
    g = psub.add_parser("get", help="the active policy")
    add_json_flag(g)
    g.set_defaults(func=policy_get)
    s = psub.add_parser("set", help="change the active policy")
    s.add_argument("name", help="even, balance, sd-feedback or sd-maxmin")
    s.add_argument("--period", type=float, default=0.0, help="seconds between decisions")
    s.add_argument("--min-change", type=float, default=0.0, help="smallest fraction of a batch worth moving")
    add_json_flag(s)
    s.set_defaults(func=policy_set)

    p = sub.add_parser("split", help="pin a manual split or release it")
    psub = p.add_subparsers(dest="action", required=True)
    pin = psub.add_parser("pin", help="pin JOB's split, e.g. `gpufair split pin job-a 48,16`")
    pin.add_argument("job_id")
    pin.add_argument("sizes", help="per-rank batch sizes, comma-separated")
    add_json_flag(pin)
    pin.set_defaults(func=split_pin)
    rel = psub.add_parser("release", help="hand JOB back to the policy")
    rel.add_argument("job_id")
    add_json_flag(rel)
    rel.set_defaults(func=split_release)

    p = sub.add_parser("explain", help="why the latest decision round did what it did")
    p.add_argument("job_id", nargs="?", default="")
    add_json_flag(p)
    p.set_defaults(func=explain)


def jobs(args: argparse.Namespace) -> int:
    def render(res: pb.ListJobsResponse) -> None:
        rows = [[j.spec.job_id, f"{j.live_ranks}/{len(j.spec.ranks)}", _sizes(j.split.batch_sizes) + ("*" if j.pinned else ""),
                 fmt(j.samples_per_s, 1), fmt(j.slowdown), fmt(j.exclusive_samples_per_s, 1), f"{j.progress:.0%}", _STATE.get(j.state, "?")]
                for j in res.jobs]
        print(table(["JOB", "RANKS", "SPLIT", "RATE/s", "SD", "EXCL/s", "DONE", "STATE"], rows) if rows else "no jobs")

    return call_and_render(args, "list jobs", "scheduler", "ListJobs", pb.ListJobsRequest(include_finished=args.all), render,
                           as_json=lambda res: [to_dict(j) for j in res.jobs])


def job(args: argparse.Namespace) -> int:
    def render(res: pb.GetJobResponse) -> None:
        j = res.job
        print(f"job {j.spec.job_id}: model {j.spec.model}, global batch {j.spec.global_batch}, {len(j.spec.ranks)} ranks, "
              f"{_STATE.get(j.state, '?')}, {j.progress:.0%} done, SD {fmt(j.slowdown)} (exclusive "
              f"{fmt(j.exclusive_samples_per_s, 1)}/s from {j.exclusive_source or '-'})")
        print(table(["RANK", "NODE", "DEVICE", "BATCH"], [[r.rank, r.node, r.device_id, b] for r, b in zip(j.spec.ranks, j.split.batch_sizes)]))
        print()
        print(table(["VERSION", "AT STEP", "SPLIT", "POLICY", "SD", "REASON"],
                    [[h.split.version, h.split.apply_step, _sizes(h.split.batch_sizes), h.split.policy, fmt(h.slowdown), h.split.reason[:80]]
                     for h in res.history]))

    return call_and_render(args, f"job {args.job_id}", "scheduler", "GetJob",
                           pb.GetJobRequest(job_id=args.job_id, history_limit=args.limit), render)


def policy_get(args: argparse.Namespace) -> int:
    def render(res: pb.GetPolicyResponse) -> None:
        print(f"policy {res.policy.name}, period {res.policy.period_s:g}s, min change {res.policy.min_change:.1%} "
              f"(available: {', '.join(res.available)})")

    return call_and_render(args, "get policy", "scheduler", "GetPolicy", pb.GetPolicyRequest(), render)


def policy_set(args: argparse.Namespace) -> int:
    req = pb.SetPolicyRequest(policy=pb.PolicyConfig(name=args.name, period_s=args.period, min_change=args.min_change))
    return call_and_render(args, "set policy", "scheduler", "SetPolicy", req,
                           lambda res: print(f"policy is now {res.policy.name} (period {res.policy.period_s:g}s)"))


def split_pin(args: argparse.Namespace) -> int:
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        return fail(f"sizes {args.sizes!r}: want comma-separated integers like 48,16", EXIT_USAGE)
    return call_and_render(args, "pin split", "scheduler", "PinSplit", pb.PinSplitRequest(job_id=args.job_id, batch_sizes=sizes),
                           lambda res: print(f"{args.job_id}: pinned {sizes} as version {res.split.version}"))


def split_release(args: argparse.Namespace) -> int:
    return call_and_render(args, "release split", "scheduler", "ReleaseSplit", pb.ReleaseSplitRequest(job_id=args.job_id),
                           lambda res: print(f"{args.job_id}: {'released' if res.was_pinned else 'was not pinned'}"))


def explain(args: argparse.Namespace) -> int:
    def render(res: pb.ExplainDecisionResponse) -> None:
        d = res.decision
        if not d.policy:
            print("no decision round has run yet")
            return
        print(f"{d.summary} (took {d.duration_s * 1000:.1f} ms)")
        for j in d.jobs:
            print(f"- {j.job_id}: {_sizes(j.old_batch_sizes)} -> {_sizes(j.new_batch_sizes)}: {j.explanation}")

    return call_and_render(args, "explain", "scheduler", "ExplainDecision", pb.ExplainDecisionRequest(job_id=args.job_id), render)


def _sizes(batch_sizes: object) -> str:
    return "/".join(map(str, batch_sizes))  # type: ignore[call-overload]
