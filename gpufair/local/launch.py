"""Launch an N-rank torch.distributed job as local processes (torchrun's env contract)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpufair.local.procs import with_parent_death, free_port


@dataclass
class LocalJob:
    name: str
    procs: list[subprocess.Popen[bytes]]
    log_dir: Path

    def wait(self, timeout: float | None = None) -> list[int]:
        return [p.wait(timeout=timeout) for p in self.procs]

    def alive(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def logs(self) -> str:
        return "\n".join(f"--- {f.name}\n{f.read_text(errors='replace')[-3000:]}" for f in sorted(self.log_dir.glob(f"{self.name}.rank*.log")))


def launch(name: str, argv: Sequence[str], world: int, log_dir: Path, env: Mapping[str, str] | None = None,
           per_rank_args: Sequence[Sequence[str]] | None = None) -> LocalJob:
    """Start `python argv... [per-rank args]` once per rank with RANK/WORLD_SIZE/MASTER_* set."""
    log_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    procs = []
    for rank in range(world):
        rank_env = dict(os.environ if env is None else env)
        rank_env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                        LOCAL_RANK=str(rank), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        extra = list(per_rank_args[rank]) if per_rank_args else []
        with open(log_dir / f"{name}.rank{rank}.log", "wb") as log:
            procs.append(subprocess.Popen(with_parent_death([sys.executable, *argv, *extra]), stdout=log, stderr=subprocess.STDOUT,
                                          env=rank_env, start_new_session=True))
    return LocalJob(name, procs, log_dir)
