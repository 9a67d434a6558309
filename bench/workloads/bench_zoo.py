"""Profile every zoo model on this machine (CPU at small sizes by default).

    .venv/bin/python bench/workloads/bench_zoo.py [--batch 8,16,32] [--devices 1,2] [--width 4]

Prints each model's table and fit, then one summary line per model with ratios against
baselines measured in the same run: throughput relative to the `cnn` model at the largest
batch, and 2-device scaling efficiency (relative to one device).
"""

from __future__ import annotations

import argparse
import logging
import time

from gpufair.client.cli.profile import format_table
from gpufair.client.workloads.profiler import ProfileConfig, run_profile
from gpufair.client.workloads.zoo import list_models


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="8,16,32")
    ap.add_argument("--devices", default="1,2")
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--width", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--models", default=",".join(list_models()))
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    batches = tuple(int(b) for b in args.batch.split(","))
    devices = tuple(int(d) for d in args.devices.split(","))
    summary = []
    for name in args.models.split(","):
        t0 = time.perf_counter()
        prof = run_profile(ProfileConfig(model=name, batches=batches, devices=devices,
                                         image_size=args.image_size, width=args.width,
                                         steps=args.steps, warmup=args.warmup))
        print(format_table(prof), f"\n({time.perf_counter() - t0:.0f} s)\n", flush=True)
        top = max(batches)
        one = next(m for m in prof.measurements if m.devices == min(devices) and m.batch == top)
        most = next(m for m in prof.measurements if m.devices == max(devices) and m.batch == top)
        summary.append((name, one.samples_per_s, most.scaling_eff, prof.fit))
    base = next((s for n, s, _, _ in summary if n == "cnn"), summary[0][1])
    print(f"{'model':<15}{'samples/s':>11}{'vs cnn':>8}{'scaling':>9}   fit t(b)")
    for name, sps, eff, fit in summary:
        fit_txt = "-" if fit is None else f"{fit.a_s * 1e3:.2f} ms + {fit.c_s * 1e3:.3f} ms*b"
        eff_txt = "-" if eff is None else f"{eff:.2f}"
        print(f"{name:<15}{sps:>11.1f}{sps / base:>8.3f}{eff_txt:>9}   {fit_txt}")


if __name__ == "__main__":
    main()
