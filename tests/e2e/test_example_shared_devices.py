"""The example trainer never deadlocks on shared emulated GPUs: two 2-rank jobs on the
same two devices, taken in opposite orders, both finish.

Each job's rank waits in backward's all-reduce for its other rank; had it held its
emulated GPU meanwhile, job A's rank on GPU 0 would wait for its rank queued behind job B
on GPU 1, and job B's rank there for its rank queued behind job A on GPU 0, for ever.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpufair.local.launch import launch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_ddp.py"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_two_jobs_on_two_shared_emulated_gpus_in_opposite_orders_both_finish(tmp_path: Path) -> None:
    # No control plane: each job trains with the even split (and says so).
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFAIR_")}
    env.update(GPUFAIR_EMU_GPUS="2", GPUFAIR_EMU_DIR=str(tmp_path / "emu"), GPUFAIR_METRICS_ADDR="127.0.0.1:9",
               GPUFAIR_SCHEDULER_ADDR="127.0.0.1:9")
    jobs = [launch(name, [str(EXAMPLE), "--job", name, "--global-batch", "16", "--epochs", "1", "--dataset-size", "4096",
                          "--hidden", "16", "--emu-device", devices, "--emu-ms-per-sample", "0.2", "--log-every", "0"],
                   2, tmp_path, env)
            for name, devices in (("job-a", "0,1"), ("job-b", "1,0"))]
    try:
        # 256 steps each, every one of them a chance for the two jobs to cross.
        for job in jobs:
            try:
                codes = job.wait(120)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{job.name} still running after 120 s (the jobs wait for each other):\n{job.logs()}")
            assert codes == [0, 0], job.logs()
    finally:
        for job in jobs:
            job.kill()
