"""`gpufair devices`: every GPU the metrics service heard of, its jobs, how busy it
is, and which jobs it holds back (their rank there is their slowest, so the
job's other ranks wait for it at every step)."""

from __future__ import annotations

import argparse

from gpufair.api.metrics.v1 import metrics_service_pb2 as pb
from gpufair.client.cli.common import add_json_flag, call_and_render, table, to_dict

_SOURCE = {pb.DEVICE_SOURCE_NVML: "nvml", pb.DEVICE_SOURCE_EMULATED: "emulated", pb.DEVICE_SOURCE_CPU: "cpu"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("devices", help="per GPU: its jobs, busy fraction, and the jobs it holds back")
    add_json_flag(p)
    p.set_defaults(func=devices)


def _occupant(o: pb.DeviceOccupant) -> str:
    return f"{o.job_id}[{o.rank}] {o.busy_fraction:.0%}"


def devices(args: argparse.Namespace) -> int:
    def render(res: pb.ListDeviceStatsResponse) -> None:
        rows = [[d.device_id, d.node or "-", _SOURCE.get(d.source, "-"), f"{d.utilization_percent:.0f}%",
                 ", ".join(_occupant(o) for o in d.occupants) or "-",
                 ", ".join(o.job_id for o in d.occupants if o.holds_back) or "-"] for d in res.devices]
        print(table(["DEVICE", "NODE", "SOURCE", "BUSY", "JOBS[RANK] BUSY", "HOLDS BACK"], rows) if rows else
              "no devices: no trainer has reported in the last few minutes")

    return call_and_render(args, "list devices", "metrics", "ListDeviceStats", pb.ListDeviceStatsRequest(), render,
                           as_json=lambda res: [to_dict(d) for d in res.devices])
