"""`make demo` / `python -m gpufair.demo`: gpufair doing its job, end to end, on one machine.

1. starts a local stack (etcd, an S3 endpoint, the metrics, scheduler and cache services);
2. puts a synthetic image dataset in a bucket and submits a Kubeflow pipeline
   that reads it: the cache planner prefetches it onto this node;
3. measures each job's exclusive speed (each alone on its own emulated GPUs);
4. layout phase: three 2-rank DDP jobs share four emulated GPUs unevenly,
   first with the `even` policy (plain DDP), then with gpufair's `sd-maxmin`;
5. arrival phase: five jobs arrive over 8 s through `gpufair submit`, more
   than the four GPUs hold, under preset `k8s` (FIFO, least-loaded,
   time-slicing, even) and then preset `gpufair` (every lever);
6. prints a side-by-side table per phase and writes results.json and slowdowns.png.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from datetime import datetime
from pathlib import Path

import grpc


def _sigterm(*_: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpufair-demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="", help="output folder (default out/demo-<time>)")
    p.add_argument("--fair-policy", default="sd-maxmin", help="policy to compare against even (default sd-maxmin)")
    p.add_argument("--phase", choices=("both", "layout", "arrivals"), default="both", help="which phase to run (default both)")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _sigterm)

    from minio import Minio

    from gpufair.api.cache.v1 import cache_service_pb2 as cpb
    from gpufair.api.cache.v1 import cache_service_pb2_grpc as cpb_grpc
    from gpufair.common.config import S3Config
    from gpufair.demo import data, report
    from gpufair.demo.arrivals import ARRIVALS, run_arrivals
    from gpufair.demo.arrivals import GPUS as ARRIVAL_GPUS
    from gpufair.demo.mix import DATA_URI, measure_exclusive, run_mix
    from gpufair.local.stack import LocalStack

    out = Path(args.out or f"out/demo-{datetime.now():%Y%m%d-%H%M%S}").resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        # An old run's etcd, emulated-GPU counters and timings would mix into this one.
        print(f"gpufair demo: --out {out} is not an empty folder; give a new one", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    stack = LocalStack(workdir=out / "stack")
    t_start = time.time()
    try:
        print("gpufair demo: starting etcd, S3, metrics, scheduler and cache ...", flush=True)
        stack.start()
        env = stack.env
        s3cfg = S3Config.from_env(env)
        s3 = Minio(s3cfg.endpoint, access_key=s3cfg.access_key, secret_key=s3cfg.secret_key, secure=s3cfg.secure)
        size = data.upload(s3)
        print(f"  dataset: {size / 2**20:.1f} MiB of synthetic images in {DATA_URI}", flush=True)
        with grpc.insecure_channel(env["GPUFAIR_CACHE_ADDR"]) as ch:
            cache = cpb_grpc.CacheServiceStub(ch)
            plan = cache.SubmitPipeline(cpb.SubmitPipelineRequest(yaml=data.pipeline_yaml(), source="examples/pipelines/demo-train.yaml",
                                                                  run_id="demo-run", start_prefetch=True), timeout=30).plan
            steps = ", ".join(f"{s.name}@{s.predicted_start_s:.0f}s" for s in plan.steps)
            print(f"  pipeline planned: {steps}; prefetching {len(plan.datasets)} dataset(s)", flush=True)
            entry = cache.Resolve(cpb.ResolveRequest(uri=DATA_URI, wait_s=120), timeout=130).entry
            print(f"  cache: {DATA_URI} -> {entry.local_path} ({entry.bytes_total / 2**20:.1f} MiB, pinned={entry.pinned})", flush=True)
        runs = []
        total = 4 if args.phase == "both" else 2
        if args.phase in ("both", "layout"):
            print("layout phase: measuring each job's exclusive speed (alone on its own emulated GPUs) ...", flush=True)
            exclusive = measure_exclusive(env, out)
            print("  " + ", ".join(f"{k} {v:.0f} samples/s" for k, v in exclusive.items()), flush=True)
            for policy, label, preset in [("even", "even", "k8s"), (args.fair_policy, "fair", "gpufair")]:
                print(f"run {len(runs) + 1}/{total}: policy {policy} (3 jobs x 2 ranks on 4 shared emulated GPUs)", flush=True)
                runs.append(run_mix(policy, env, out, exclusive, label, preset))
        if args.phase in ("both", "arrivals"):
            print("arrival phase: measuring each arriving job's exclusive speed ...", flush=True)
            exclusive = measure_exclusive(env, out, ARRIVALS)
            print("  " + ", ".join(f"{k} {v:.0f}" for k, v in exclusive.items()) + " samples/s", flush=True)
            for preset in ("k8s", "gpufair"):
                print(f"run {len(runs) + 1}/{total}: preset {preset} ({len(ARRIVALS)} jobs submitted over "
                      f"{ARRIVALS[-1].at_s:.0f}s onto {ARRIVAL_GPUS} emulated GPUs)", flush=True)
                runs.append(run_arrivals(preset, env, out, exclusive))
        for phase, title in (("layout", "layout phase: fixed GPUs, the split policy"),
                             ("arrivals", "arrival phase: jobs submitted over time, every lever")):
            if any(r.phase == phase for r in runs):
                print(f"\n{title}")
                print(report.table([r for r in runs if r.phase == phase]))
        report.write_json(runs, out / "results.json")
        report.chart(runs, out / "slowdowns.png")
        print(f"\nresults: {out / 'results.json'}\nchart:   {out / 'slowdowns.png'}\n(total {time.time() - t_start:.0f}s)")
        return 0
    except KeyboardInterrupt:
        print("\ninterrupted: stopping everything", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - one clear line plus where the logs are
        print(f"gpufair demo failed: {exc}\nlogs: {out}", file=sys.stderr)
        print(stack.logs()[-3000:], file=sys.stderr)
        return 1
    finally:
        stack.stop()


if __name__ == "__main__":
    sys.exit(main())
