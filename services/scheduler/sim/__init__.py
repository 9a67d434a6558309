"""Trace-driven simulator: the policy core's code over a simulated cluster."""

from __future__ import annotations

from pathlib import Path

from gpufair.scheduler.sim.colocation import Colocation, ModelCost, gpu_types, load_colocation
from gpufair.scheduler.sim.engine import SimConfig, Simulator
from gpufair.scheduler.policy.placement import (DEFAULT_PLACEMENT, check_placement,
                                                choose_gpus, placement_names)
from gpufair.scheduler.sim.result import JobResult, SimResult
from gpufair.scheduler.sim.workload import (ADAPTDL_MODELS, TraceJob, load_workload,
                                            parse_workload)


def simulate(colocation: Colocation, trace: tuple[TraceJob, ...], config: SimConfig) -> SimResult:
    """Run one policy over one trace."""
    return Simulator(colocation, trace, config).run()


def simulate_files(colocation_path: str | Path, gpu_type: str, workload_path: str | Path,
                   config: SimConfig) -> SimResult:
    """Load the co-location file and the trace, then simulate."""
    return simulate(load_colocation(colocation_path, gpu_type), load_workload(workload_path),
                    config)


__all__ = ["ADAPTDL_MODELS", "DEFAULT_PLACEMENT", "Colocation", "JobResult", "ModelCost",
           "SimConfig", "SimResult", "Simulator", "TraceJob", "check_placement", "choose_gpus",
           "gpu_types", "load_colocation", "load_workload", "parse_workload", "placement_names",
           "simulate", "simulate_files"]
