"""`gpufair jobs | job ID | job rm ID | policy get/set | split pin/release | explain`:
the scheduler's admin RPCs. Job states come from the scheduler's record in etcd."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.client.cli.common import (EXIT_USAGE, add_json_flag, call_and_render, fail, fmt, in_range, int_list, table,
                                       to_dict)
from gpufair.common import limits

_STATE = {pb.JOB_STATE_QUEUED: "queued", pb.JOB_STATE_RUNNING: "running", pb.JOB_STATE_FINISHED: "finished",
          pb.JOB_STATE_FAILED: "failed", pb.JOB_STATE_REMOVED: "removed"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("jobs", help="active jobs (--all: with ended ones): ranks, split, rate, slow-down, state")
    p.add_argument("--all", action="store_true", help="also list ended jobs (finished, failed, removed) the retention rule keeps")
    add_json_flag(p)
    p.set_defaults(func=jobs)

    p = sub.add_parser("job", help="`job ID`: one job with its history; `job rm ID`: remove it",
                       description="`gpufair job ID` shows one job with its history of splits and slow-downs. "
                       "`gpufair job rm ID` ends an active job as removed (it stays in `jobs --all` until the "
                       "retention rule purges it) and purges an ended job's record; --purge purges at once.")
    p.add_argument("words", nargs="+", metavar="ID | rm ID", help="a job id, or rm and a job id")
    p.add_argument("--limit", type=in_range(int, 0, limits.MAX_HISTORY, "history entries"), default=20,
                   help="history entries (default 20)")
    p.add_argument("--purge", action="store_true", help="with rm: delete the record at once, even of an active job")
    add_json_flag(p)
    p.set_defaults(func=job)

    p = sub.add_parser("policy", help="show or change the scheduling policy")
    psub = p.add_subparsers(dest="action", required=True)
    g = psub.add_parser("get", help="the active policy")
    add_json_flag(g)
    g.set_defaults(func=policy_get)
    s = psub.add_parser("set", help="change the active policy")
    s.add_argument("name", nargs="?", default="",
                   help="the split policy: even, balance, sd-feedback or sd-maxmin (omitted: keep, or the preset's)")
    s.add_argument("--preset", default="", choices=("gpufair", "k8s"),
                   help="gpufair: every lever on (queue by slow-down, placement, paced GPU shares, sd-maxmin "
                   "splits); k8s: FIFO, least-loaded, time-slicing, even splits")
    s.add_argument("--queue", default="", choices=("fifo", "fifo-strict", "las", "sd"),
                   help="queue order (omitted: keep)")
    s.add_argument("--placement", default="", choices=("least-loaded", "packed", "random", "sd"),
                   help="where submitted jobs go (omitted: keep)")
    s.add_argument("--shares", default="", choices=("time-slicing", "paced"),
                   help="how a shared GPU's time is divided (omitted: keep)")
    s.add_argument("--period", type=in_range(float, *limits.PERIOD_S, "seconds"), default=None,
                   help=f"seconds between decisions ({limits.PERIOD_S[0]:g}-{limits.PERIOD_S[1]:g}; omitted: keep the current)")
    s.add_argument("--min-change", type=in_range(float, *limits.MIN_CHANGE, "a fraction"), default=None,
                   help="smallest fraction of a batch worth moving (0-0.99; omitted: keep the current; 0 is sent as the "
                   "smallest step, 0.001)")
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


#: A running job that is not held is shown as stalled once its last step is this
#: long ago, or five of its steps if those are longer (a hung loader or collective).
STALL_S = 30.0


def _duration(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{seconds:.1f}s"


def _elapsed(j: pb.JobSummary) -> str:
    return "-" if not j.started_unix_s else _duration(j.elapsed_s)


def _stalled_s(j: pb.JobSummary, now: float) -> float | None:
    """Seconds since a running job's last step, where that is far past its step time
    and the scheduler does not hold it; else None."""
    held = bool(j.split.shares) and max(j.split.shares) <= 0
    if j.state != pb.JOB_STATE_RUNNING or not j.last_step_unix_s or held:
        return None
    quiet = now - j.last_step_unix_s
    step = j.spec.global_batch / j.samples_per_s if j.samples_per_s > 0 else 0.0
    return quiet if quiet > max(STALL_S, 5 * step) else None


def _state(j: pb.JobSummary, now: float) -> str:
    quiet = _stalled_s(j, now)
    return _STATE.get(j.state, "?") + ("" if quiet is None else f", no step for {_duration(quiet)}")


def _rate(j: pb.JobSummary, now: float) -> str:
    if _stalled_s(j, now) is not None:
        return "0.0"  # the last measured rate is history: it has stopped
    # A stale rate is the last one known while the metrics service does not answer.
    return fmt(j.samples_per_s, 1) + ("?" if j.stale and j.samples_per_s else "")


def _share(shares: Sequence[float]) -> str:
    """A paced job's share of its GPUs' time ("-": not paced, time-sliced)."""
    if not shares:
        return "-"
    if max(shares) <= 0:
        return "held"
    return "/".join(f"{x:.0%}" for x in shares)


def _neighbours(jobs: Sequence[pb.JobSummary]) -> dict[str, str]:
    """Per job, the other listed jobs on any of its GPUs."""
    on: dict[str, set[str]] = {}
    for j in jobs:
        for r in j.spec.ranks:
            on.setdefault(r.device_id, set()).add(j.spec.job_id)
    return {j.spec.job_id: ",".join(sorted(set().union(*(on[r.device_id] for r in j.spec.ranks)) - {j.spec.job_id}))
            or "-" for j in jobs}


def jobs(args: argparse.Namespace) -> int:
    def render(res: pb.ListJobsResponse) -> None:
        now = time.time()
        near = _neighbours([j for j in res.jobs if j.state in (pb.JOB_STATE_QUEUED, pb.JOB_STATE_RUNNING)])
        rows = [[j.spec.job_id, f"{j.live_ranks}/{len(j.spec.ranks)}", ",".join(r.device_id for r in j.spec.ranks),
                 near.get(j.spec.job_id, "-"), _share(j.split.shares),
                 _sizes(j.split.batch_sizes) + ("*" if j.pinned else ""),
                 _rate(j, now), fmt(j.slowdown), fmt(j.exclusive_samples_per_s, 1), f"{j.progress:.0%}", _elapsed(j),
                 _state(j, now)] for j in res.jobs]
        print(table(["JOB", "RANKS", "GPUS", "NEIGHBOURS", "SHARE", "SPLIT", "RATE/s", "SD", "EXCL/s", "DONE", "ELAPSED",
                     "STATE"], rows) if rows else
              ("no jobs" if args.all else "no active jobs (gpufair jobs --all lists ended ones too; "
                                           "gpufair queue, submitted ones still waiting)"))
        if any(j.stale for j in res.jobs):
            print("?: last known figures: the metrics service has not answered for these jobs")

    return call_and_render(args, "list jobs", "scheduler", "ListJobs", pb.ListJobsRequest(include_finished=args.all), render,
                           as_json=lambda res: [to_dict(j) for j in res.jobs])


def job(args: argparse.Namespace) -> int:
    if args.words[0] == "rm" and len(args.words) == 2:
        return job_rm(args, args.words[1])
    if len(args.words) != 1 or args.purge:
        return fail("usage: gpufair job ID | gpufair job rm [--purge] ID", EXIT_USAGE)
    job_id = args.words[0]

    def render(res: pb.GetJobResponse) -> None:
        j = res.job
        print(f"job {j.spec.job_id}: model {j.spec.model}, global batch {j.spec.global_batch}, {len(j.spec.ranks)} ranks, "
              f"{_state(j, time.time())} ({j.state_reason or '-'}), {j.progress:.0%} done, elapsed {_elapsed(j)}, "
              f"SD {fmt(j.slowdown)} (exclusive {fmt(j.exclusive_samples_per_s, 1)}/s from {j.exclusive_source or '-'})"
              + (", figures stale" if j.stale else ""))
        shares = list(j.split.shares) or [None] * len(j.spec.ranks)
        print(table(["RANK", "NODE", "DEVICE", "BATCH", "SHARE"],
                    [[r.rank, r.node, r.device_id, b, "-" if x is None else f"{x:.0%}"]
                     for r, b, x in zip(j.spec.ranks, j.split.batch_sizes, shares)]))
        print()
        print(table(["SPLIT", "ISSUED", "AT STEP", "SIZES", "POLICY", "SD", "REASON"],
                    [[_number(h.split), _clock(h.split.issued_unix_s), h.split.apply_step, _sizes(h.split.batch_sizes), h.split.policy,
                      fmt(h.slowdown), h.split.reason[:80]] for h in res.history]))

    return call_and_render(args, f"job {job_id}", "scheduler", "GetJob",
                           pb.GetJobRequest(job_id=job_id, history_limit=args.limit), render)


def job_rm(args: argparse.Namespace, job_id: str) -> int:
    def render(res: pb.RemoveJobResponse) -> None:
        was = _STATE.get(res.previous_state, "?")
        print(f"{job_id}: {'record purged' if res.purged else 'ended as removed (kept in gpufair jobs --all)'} (was {was})")

    return call_and_render(args, f"job rm {job_id}", "scheduler", "RemoveJob", pb.RemoveJobRequest(job_id=job_id, purge=args.purge),
                           render)


def _levers(p: pb.PolicyConfig) -> str:
    return f"queue {p.queue}, placement {p.placement}, shares {p.shares}"


def policy_get(args: argparse.Namespace) -> int:
    def render(res: pb.GetPolicyResponse) -> None:
        print(f"policy {res.policy.name}, period {res.policy.period_s:g}s, min change {res.policy.min_change:.1%}; "
              f"{_levers(res.policy)} (split policies: {', '.join(res.available)})")

    return call_and_render(args, "get policy", "scheduler", "GetPolicy", pb.GetPolicyRequest(), render)


def policy_set(args: argparse.Namespace) -> int:
    # 0 means "keep the current value" on the wire, so an explicit 0 travels as the smallest change there is.
    min_change = None if args.min_change is None else (args.min_change or 0.001)
    if not (args.name or args.preset or args.queue or args.placement or args.shares or args.period
            or args.min_change is not None):
        return fail("policy set: give a split policy, --preset or a lever to change", EXIT_USAGE)
    req = pb.SetPolicyRequest(policy=pb.PolicyConfig(
        name=args.name, period_s=args.period or 0.0, min_change=min_change or 0.0, queue=args.queue,
        placement=args.placement, shares=args.shares, preset=args.preset))
    return call_and_render(args, "set policy", "scheduler", "SetPolicy", req,
                           lambda res: print(f"policy is now {res.policy.name} (period {res.policy.period_s:g}s, "
                                             f"min change {res.policy.min_change:.1%}); {_levers(res.policy)}"))


def split_pin(args: argparse.Namespace) -> int:
    try:
        sizes = int_list(args.sizes, 1, limits.MAX_BATCH, "sizes")
    except ValueError as exc:
        return fail(f"{exc} (comma-separated per-rank batch sizes like 48,16)", EXIT_USAGE)
    return call_and_render(args, "pin split", "scheduler", "PinSplit", pb.PinSplitRequest(job_id=args.job_id, batch_sizes=sizes),
                           lambda res: print(f"{args.job_id}: pinned {_sizes(sizes)} as split {_number(res.split)}"))


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


def _number(s: pb.SplitCommand) -> str:
    """A split as people read it: its place in the job's life, else the time it was issued."""
    return f"#{s.number}" if s.number else _clock(s.issued_unix_s)


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) if t else "-"


def _sizes(batch_sizes: object) -> str:
    return "/".join(map(str, batch_sizes))  # type: ignore[call-overload]
