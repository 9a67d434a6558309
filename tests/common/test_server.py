"""The shared server: health follows dependencies, errors map to statuses, SIGTERM drains."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from gpufair.api.metrics.v1 import metrics_service_pb2 as mpb
from gpufair.api.metrics.v1 import metrics_service_pb2_grpc as mpb_grpc
from gpufair.common.channels import keepalive_options, server_keepalive_options
from gpufair.common.config import CommonConfig
from gpufair.common.errors import NotFound
from gpufair.common.etcd import EtcdState
from gpufair.common.server import ServerDeps, ServiceBinding, create_server
from gpufair.local import EtcdServer, free_port

SERVICE = mpb.DESCRIPTOR.services_by_name["MetricsService"].full_name


class _Exploding(mpb_grpc.MetricsServiceServicer):
    async def GetJobStats(self, request, context):
        if request.job_id == "missing":
            raise NotFound("no telemetry for job 'missing'")
        raise RuntimeError("secret internal detail")


async def _status(channel: grpc.aio.Channel, service: str = "") -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return (await stub.Check(health_pb2.HealthCheckRequest(service=service))).status


async def test_health_follows_etcd_and_drains(tmp_path) -> None:
    etcd = EtcdServer(workdir=tmp_path, client_port=free_port())
    state = EtcdState(etcd.endpoint, timeout=1)
    probed_down = asyncio.Event()
    probes = {"down": 0}

    async def readiness() -> bool:
        ok = await state.ping()
        probes["down"] += not ok
        if probes["down"] >= 3:
            probed_down.set()
        return ok

    deps = ServerDeps(services=[ServiceBinding(SERVICE, lambda s: mpb_grpc.add_MetricsServiceServicer_to_server(_Exploding(), s))],
                      readiness=readiness, readiness_period_s=0.1)
    running = await create_server(CommonConfig(listen="127.0.0.1:0"), deps)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            watch = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest(service=SERVICE))
            assert (await asyncio.wait_for(watch.read(), 5)).status == health_pb2.HealthCheckResponse.NOT_SERVING
            await asyncio.wait_for(probed_down.wait(), 10)  # the probe ran, saw etcd down, and the status stayed
            assert await _status(ch) == health_pb2.HealthCheckResponse.NOT_SERVING
            etcd.start()
            assert (await asyncio.wait_for(watch.read(), 30)).status == health_pb2.HealthCheckResponse.SERVING
            assert await _status(ch) == health_pb2.HealthCheckResponse.SERVING  # the overall status too
            etcd.kill()
            assert (await asyncio.wait_for(watch.read(), 30)).status == health_pb2.HealthCheckResponse.NOT_SERVING
            etcd.start()
            assert (await asyncio.wait_for(watch.read(), 30)).status == health_pb2.HealthCheckResponse.SERVING
            await running.set_serving(False)  # what stop() does first: drain
            assert (await asyncio.wait_for(watch.read(), 5)).status == health_pb2.HealthCheckResponse.NOT_SERVING
            watch.cancel()
    finally:
        await running.stop(0)
        await state.close()
        etcd.close()


async def test_domain_errors_map_to_codes_and_unexpected_ones_hide_details() -> None:
    async def ready() -> bool:
        return True

    deps = ServerDeps(services=[ServiceBinding(SERVICE, lambda s: mpb_grpc.add_MetricsServiceServicer_to_server(_Exploding(), s))], readiness=ready)
    running = await create_server(CommonConfig(listen="127.0.0.1:0"), deps)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            stub = mpb_grpc.MetricsServiceStub(ch)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.GetJobStats(mpb.GetJobStatsRequest(job_id="missing"))
            assert err.value.code() == grpc.StatusCode.NOT_FOUND and "missing" in err.value.details()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.GetJobStats(mpb.GetJobStatsRequest(job_id="x"))
            assert err.value.code() == grpc.StatusCode.INTERNAL
            assert "secret" not in err.value.details() and "incident" in err.value.details()
    finally:
        await running.stop(0)


def test_service_process_serves_health_and_exits_cleanly_on_sigterm() -> None:
    env = dict(os.environ, GPUFAIR_LISTEN="127.0.0.1:0", GPUFAIR_LOG_LEVEL="WARNING")
    proc = subprocess.Popen([sys.executable, "-m", "gpufair.metrics"], stdout=subprocess.PIPE, env=env, text=True)
    try:
        line = proc.stdout.readline()
        assert "listening on port" in line, line
        port = int(line.rsplit(" ", 1)[1])
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            grpc.channel_ready_future(ch).result(timeout=10)
            stub = health_pb2_grpc.HealthStub(ch)
            for _ in range(50):
                if stub.Check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.SERVING:
                    break
                time.sleep(0.05)
            assert stub.Check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.SERVING
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("env", [{"GPUFAIR_POLICY": "fastest"}, {"GPUFAIR_PERIOD_S": "soon"}, {"GPUFAIR_LEASE_TTL": "ten"}])
def test_bad_configuration_is_one_line_and_exit_2(env: dict[str, str]) -> None:
    full = dict(os.environ, GPUFAIR_LISTEN="127.0.0.1:0", GPUFAIR_ETCD="127.0.0.1:1", **env)
    done = subprocess.run([sys.executable, "-m", "gpufair.scheduler"], env=full, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "bad configuration" in done.stderr and "Traceback" not in done.stderr



@pytest.mark.parametrize("server_side", [True, False])
async def test_a_quiet_stream_survives_the_clients_keepalive_pings(server_side: bool) -> None:
    """A held job's command stream carries nothing for minutes; its client pings the
    connection. gRPC's default server answers pings more often than every 5 minutes
    with GOAWAY "too_many_pings", which broke such streams: gpufair servers accept
    their clients' pings (shown at 1 s instead of 20 s; without the server side, the
    stream breaks)."""
    server = grpc.aio.server(options=server_keepalive_options(1000) if server_side else [])
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()

    def watch() -> str:
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=keepalive_options(1000)) as ch:
            call = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest(), timeout=6)
            try:
                for _ in call:
                    pass
            except grpc.RpcError as exc:
                return exc.code().name
        return "ended"

    try:
        outcome = await asyncio.to_thread(watch)
    finally:
        await server.stop(0)
    assert outcome == ("DEADLINE_EXCEEDED" if server_side else "UNAVAILABLE")

