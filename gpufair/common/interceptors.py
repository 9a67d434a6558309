"""One server interceptor: domain errors -> status codes, a span and metrics per RPC.

Cores raise `gpufair.common.errors` types; here they become INVALID_ARGUMENT,
NOT_FOUND, ... with the error's message, its echoed values cut short
(`errors.bounded`). Request bytes that do not parse are the caller's mistake:
INVALID_ARGUMENT. A caller's mistake logs one WARNING line (at most one per
method and status every `WARN_EVERY_S`, with a count of the rest); only
anything unexpected, our own bug, becomes INTERNAL with a generic message and
an incident id, its traceback in the log.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from opentelemetry import metrics, trace

from gpufair.common.errors import GpufairError, InvalidArgument, bounded
from gpufair.common.handlers import Undecodable, rebuild, tolerant
from gpufair.common.observability import SECONDS_BUCKETS

logger = logging.getLogger(__name__)

WARN_EVERY_S = 10.0
# Malformed requests; FAILED_PRECONDITION is left out: a trainer of a job that has just
# ended reconnecting its command stream is no mistake worth a line.
_CALLER_MISTAKES = frozenset({"INVALID_ARGUMENT", "OUT_OF_RANGE"})


class _Warnings:
    """One WARNING line per (method, status) per period; the suppressed ones are counted into the next."""

    def __init__(self, every_s: float) -> None:
        self._every, self._last, self._held = every_s, {}, {}

    def warn(self, method: str, code: str, message: str) -> None:
        key, now = (method, code), time.monotonic()
        if now - self._last.get(key, -self._every) < self._every:
            self._held[key] = self._held.get(key, 0) + 1
            return
        self._last[key] = now
        held = self._held.pop(key, 0)
        logger.warning("%s: %s: %s%s", method.rsplit("/", 1)[-1], code, message,
                       f" (and {held} more like it in the last {self._every:g}s)" if held else "")


def _decoded(request: Any) -> Any:
    if isinstance(request, Undecodable):
        raise InvalidArgument(f"the request is not a valid {request.message_type}: {request.error}")
    return request


async def _decoded_stream(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for r in requests:
        yield _decoded(r)


class ErrorInterceptor(grpc.aio.ServerInterceptor):
    """Maps exceptions raised by servicers (and undecodable requests) to gRPC statuses;
    records each RPC's duration and status."""

    def __init__(self, meter: metrics.Meter | None = None) -> None:
        meter = meter or metrics.get_meter("gpufair.rpc")
        self._duration = meter.create_histogram("gpufair_rpc_server_duration_seconds", unit="s",
                                                description="time to answer an RPC (a stream: its whole life), by method and status",
                                                explicit_bucket_boundaries_advisory=SECONDS_BUCKETS)
        self._warnings = _Warnings(WARN_EVERY_S)
        self._tracer = trace.get_tracer("gpufair.rpc")

    def _status(self, method: str, exc: BaseException) -> tuple[grpc.StatusCode, str]:
        if isinstance(exc, GpufairError):
            message = bounded(str(exc))
            if exc.code_name in _CALLER_MISTAKES:
                self._warnings.warn(method, exc.code_name, message)
            return getattr(grpc.StatusCode, exc.code_name), message
        incident = uuid.uuid4().hex[:12]
        logger.error("unexpected error in %s (incident %s)", method, incident, exc_info=exc)
        return grpc.StatusCode.INTERNAL, f"internal error (incident {incident}; details in the server log)"

    @contextlib.asynccontextmanager
    async def _scope(self, method: str, context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
        """Around one call: a span, the error -> status mapping, and the call's duration and status."""
        t0, code = time.perf_counter(), "OK"
        with self._tracer.start_as_current_span(method, kind=trace.SpanKind.SERVER) as span:
            try:
                yield
            except grpc.aio.AbortError:
                code = "ABORTED_BY_HANDLER"
                raise
            except Exception as exc:  # noqa: BLE001 - every error gets a status
                status, message = self._status(method, exc)
                code = status.name
                span.set_attribute("rpc.grpc.status_code", status.value[0])
                await context.abort(status, message)
            finally:
                self._duration.record(time.perf_counter() - t0, {"method": method.rsplit("/", 1)[-1], "code": code})

    def _wrap_unary(self, behavior: Callable[..., Awaitable[Any]], method: str, request_stream: bool) -> Callable[..., Awaitable[Any]]:
        async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
            async with self._scope(method, context):
                return await behavior(_decoded_stream(request) if request_stream else _decoded(request), context)

        return wrapper

    def _wrap_stream(self, behavior: Callable[..., AsyncIterator[Any]], method: str, request_stream: bool) -> Callable[..., AsyncIterator[Any]]:
        async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            async with self._scope(method, context):
                async for item in behavior(_decoded_stream(request) if request_stream else _decoded(request), context):
                    yield item

        return wrapper

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method

        # A streaming handler is an async generator, or a coroutine that writes with
        # context.write (grpc_health's Watch): that one is wrapped like a unary call.
        def make(behavior: Any, request_stream: bool, stream: bool) -> Any:
            if stream and inspect.isasyncgenfunction(behavior):
                return self._wrap_stream(behavior, method, request_stream)
            return self._wrap_unary(behavior, method, request_stream)

        return rebuild(handler, make, tolerant(handler.request_deserializer))
