"""The command follower: every loop of a session follows the commands, over one stream."""

from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc

from gpufair.api.scheduler.v1 import scheduler_service_pb2 as pb
from gpufair.api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from gpufair.client.commands import GrpcCommandSource


class _TwoCommands(pb_grpc.SchedulerServiceServicer):
    def __init__(self) -> None:
        self.streams = 0

    def StreamCommands(self, request, context):
        self.streams += 1
        for v in (5, 6):
            yield pb.StreamCommandsResponse(command=pb.SplitCommand(job_id=request.job_id, version=v, apply_step=v, batch_sizes=[v, 8 - v]))
        threading.Event().wait(10)  # keep the stream open like the real service


def test_two_loops_share_one_stream_and_both_end_on_the_newest_command() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(4))
    servicer = _TwoCommands()
    pb_grpc.add_SchedulerServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    source = GrpcCommandSource(channel, job_id="j", rank=0)
    seen: dict[str, list[int]] = {"train": [], "val": []}
    try:
        source.start(lambda c: seen["train"].append(c.version) or True)
        source.start(lambda c: seen["val"].append(c.version) or True)
        deadline = time.monotonic() + 10
        while (len(seen["train"]) < 2 or not seen["val"] or seen["val"][-1] != 6) and time.monotonic() < deadline:
            time.sleep(0.01)
        # The second loop may start after both arrived: it then gets the newest one.
        assert seen["train"] == [5, 6] and seen["val"][-1] == 6 and seen["val"] in ([5, 6], [6])
        assert servicer.streams == 1
    finally:
        source.stop()
        channel.close()
        server.stop(0)
