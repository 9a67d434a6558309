"""`gpufair profile`: measure a zoo model's exclusive speed, print it, store it.

    gpufair profile --model resnet18 --batch 256,512,1024 --devices 1,2 [--json] [--store]
"""

from __future__ import annotations

import argparse
import json
import sys

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.client.cli.common import EXIT_OK, Endpoints, call, exit_code, in_range
from gpufair.client.workloads.record import Profile
from gpufair.common.errors import GpufairError


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"want comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"want positive integers, got {text!r}")
    return values


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `profile` subcommand."""
    p = subparsers.add_parser(
        "profile", help="measure a model's exclusive training speed on this machine",
        description="Timed SGD steps on synthetic images at each per-device batch and device count; "
                    "fits t(b) = a + c*b. On CUDA one process per GPU (NCCL), else CPU processes (gloo).",
    )
    p.add_argument("--model", required=True, help="zoo model name (see --model help for the list)")
    p.add_argument("--batch", type=_int_list, default=(256, 512, 1024),
                   help="per-device batch sizes, comma-separated (default 256,512,1024)")
    p.add_argument("--devices", type=_int_list, default=(1,),
                   help="device counts, comma-separated (default 1)")
    p.add_argument("--json", action="store_true", help="print a JSON list of measurements")
    p.add_argument("--image-size", type=in_range(int, 8, 1024, "pixels"), default=32, help="input image side in pixels (default 32)")
    p.add_argument("--width", type=in_range(int, 1, 1024, "a width"), default=8, help="built-in models' base width (default 8)")
    p.add_argument("--steps", type=in_range(int, 1, 100_000, "steps"), default=10, help="timed steps per point (default 10)")
    p.add_argument("--warmup", type=in_range(int, 0, 10_000, "steps"), default=3, help="warm-up steps per point (default 3)")
    p.add_argument("--threads", type=in_range(int, 1, 256, "threads"), default=1, help="CPU threads per device process (default 1)")
    p.add_argument("--impl", default="auto", choices=("auto", "builtin", "torchvision"),
                   help="model definitions (default auto: torchvision when it imports and size >= 64)")
    p.add_argument("--store", action="store_true",
                   help="store the profile in the scheduler (at $GPUFAIR_SCHEDULER_ADDR; needs the admin token)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the profile; 0 ok, 2 bad input, 1 runtime failure (e.g. the scheduler down)."""
    # Imported here: the CLI's other subcommands should not pay for torch.
    from gpufair.client.workloads.profiler import ProfileConfig, run_profile

    try:
        cfg = ProfileConfig(
            model=args.model, batches=tuple(args.batch), devices=tuple(args.devices),
            image_size=args.image_size, width=args.width, steps=args.steps, warmup=args.warmup,
            threads_per_device=args.threads, impl=args.impl,
        )
        profile = run_profile(cfg)
    except GpufairError as e:
        print(f"gpufair profile: {e}", file=sys.stderr)
        return exit_code(e.code_name)
    if args.store:
        ep = Endpoints.from_env()
        _, code = call("store profile", "scheduler", "PutProfile", pb.PutProfileRequest(profile=profile.to_pb()), endpoints=ep)
        if code:
            return code
    if args.json:
        print(json.dumps([m.to_dict() for m in profile.measurements], indent=2))
    else:
        print(format_table(profile))
        if args.store:
            print(f"stored in the scheduler at {ep.scheduler} as {profile.model}/{profile.device_type}")
    return EXIT_OK


def format_table(profile: Profile) -> str:
    """A readable table of the measurements plus the fitted step-time model."""
    w = max(14, len(profile.model) + 2)
    d = max(12, len(profile.device_type) + 2)
    head = f"{'model':<{w}}{'device':<{d}}{'devs':>5}{'batch':>7}{'samples/s':>12}" \
           f"{'step ms':>9}{'p10-p90 ms':>14}{'peak MiB':>10}{'scaling':>9}{'util%':>7}"
    lines = [head, "-" * len(head)]
    for m in profile.measurements:
        spread = f"{m.step_s_p10 * 1e3:.1f}-{m.step_s_p90 * 1e3:.1f}"
        eff = "-" if m.scaling_eff is None else f"{m.scaling_eff:.2f}"
        util = "-" if m.gpu_util_pct is None else f"{m.gpu_util_pct:.0f}"
        lines.append(f"{m.model:<{w}}{m.device_type:<{d}}{m.devices:>5}{m.batch:>7}{m.samples_per_s:>12.1f}"
                     f"{m.step_s * 1e3:>9.2f}{spread:>14}{m.peak_mem_bytes / 2**20:>10.0f}{eff:>9}{util:>7}")
    if profile.fit is None:
        lines.append("fit: needs at least two batch sizes")
    else:
        f = profile.fit
        lines.append(f"fit ({profile.fit_devices} device): t(b) = {f.a_s * 1e3:.3f} ms + "
                     f"{f.c_s * 1e6:.3f} us x b  (per-device batch b)")
    return "\n".join(lines)
