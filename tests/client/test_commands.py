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


class _Flaky(pb_grpc.SchedulerServiceServicer):
    """The first stream breaks after the current split; later ones send it again
    (as the service does) or, with `silent`, nothing."""

    def __init__(self, silent: bool) -> None:
        self.streams, self.silent = 0, silent

    def StreamCommands(self, request, context):
        self.streams += 1
        if self.streams == 1 or not self.silent:
            yield pb.StreamCommandsResponse(command=pb.SplitCommand(job_id=request.job_id, version=5, batch_sizes=[4, 4]))
        if self.streams == 1:
            context.abort(grpc.StatusCode.UNAVAILABLE, "replica going away")
        threading.Event().wait(10)


def test_a_reconnected_stream_counts_as_up_without_a_new_command() -> None:
    """A held job waits on its stream: once the stream is back (the current split
    arrives again) the control plane is not lost; a stream that answers nothing is."""
    for silent in (False, True):
        server = grpc.server(futures.ThreadPoolExecutor(4))
        servicer = _Flaky(silent)
        pb_grpc.add_SchedulerServiceServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        source = GrpcCommandSource(channel, job_id="j", rank=0, lost_after_s=0.3)
        try:
            source.start(lambda c: True)
            deadline = time.monotonic() + 10
            while servicer.streams < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.6)  # twice lost_after_s: long enough to count as lost if it were down
            assert servicer.streams == 2 and source.known_version == 5
            assert source.lost() is silent
        finally:
            source.stop()
            channel.close()
            server.stop(0)
