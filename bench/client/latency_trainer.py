"""One rank of the command-latency benchmark: a 2-rank gloo job paced at a fixed step time.

Started by command_latency.py through `gpufair.local.launch` (torchrun's env
contract). Records, per split version, when this rank's command thread
received it and the first step that ran with it, then writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import TensorDataset

import gpufair.client


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--job", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--step-s", type=float, default=0.1)
    p.add_argument("--sync-every", type=int, default=10, help="agreements at most this many steps apart")
    p.add_argument("--sync-every-s", type=float, default=0.0, help="about this often (seconds); 0: every --sync-every steps")
    p.add_argument("--out", required=True, help="JSON path prefix; .rank<R>.json is appended")
    args = p.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(32, 32))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    dataset = TensorDataset(torch.randn(64 * 500, 32))
    session = gpufair.client.init(args.job, 64, total_samples=10**9, model="latency-linear")
    holder: dict[str, Any] = {}
    received: dict[int, tuple[float, int]] = {}

    def on_command(command: Any, t: float) -> None:
        plan = holder["loop"].plan if "loop" in holder else None
        received.setdefault(command.version, (t, plan.global_step if plan else -1))

    if session._commands is not None:  # the benchmark listens in on the command thread
        session._commands._on_command = on_command
    loop = holder["loop"] = session.loop(dataset, sync_every=args.sync_every,
                                           sync_every_s=args.sync_every_s or None)
    applied: dict[int, tuple[float, int, list[int]]] = {}
    done, epoch, next_t = 0, 0, time.perf_counter()
    while done < args.steps:
        for (x,) in loop.epoch(epoch):
            plan = loop.plan
            version = loop.agreement.entry_for_step(plan.global_step).version
            if version not in applied:
                applied[version] = (time.time(), plan.global_step, list(plan.split))
            loop.scale_loss(model(x).pow(2).mean()).backward()
            opt.step()
            opt.zero_grad()
            next_t += args.step_s
            time.sleep(max(0.0, next_t - time.perf_counter()))
            done += 1
            if done >= args.steps:
                break
        epoch += 1
    session.close()
    with open(f"{args.out}.rank{rank}.json", "w", encoding="utf-8") as fh:
        json.dump({"received": received, "applied": applied, "registered": session.registered}, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
