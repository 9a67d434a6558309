"""One server interceptor: domain errors -> status codes, a span per RPC.

Cores raise `gpufair.common.errors` types; here they become INVALID_ARGUMENT,
NOT_FOUND, ... with the error's message. Anything unexpected becomes INTERNAL
with a generic message and an incident id; the traceback goes to the log only.
"""

from __future__ import annotations

import inspect
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from opentelemetry import trace

from gpufair.common.errors import GpufairError
from gpufair.common.handlers import rebuild

logger = logging.getLogger(__name__)


def _status(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    if isinstance(exc, GpufairError):
        return getattr(grpc.StatusCode, exc.code_name), str(exc)
    incident = uuid.uuid4().hex[:12]
    logger.error("unexpected error (incident %s)", incident, exc_info=exc)
    return grpc.StatusCode.INTERNAL, f"internal error (incident {incident}; details in the server log)"


async def _abort(context: grpc.aio.ServicerContext, exc: BaseException) -> None:
    code, message = _status(exc)
    trace.get_current_span().set_attribute("rpc.grpc.status_code", code.value[0])
    await context.abort(code, message)


def _wrap_unary(behavior: Callable[..., Awaitable[Any]], method: str) -> Callable[..., Awaitable[Any]]:
    tracer = trace.get_tracer("gpufair.rpc")

    async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
        with tracer.start_as_current_span(method, kind=trace.SpanKind.SERVER):
            try:
                return await behavior(request, context)
            except grpc.aio.AbortError:
                raise
            except Exception as exc:  # noqa: BLE001 - every error gets a status
                await _abort(context, exc)

    return wrapper


def _wrap_stream(behavior: Callable[..., AsyncIterator[Any]], method: str) -> Callable[..., AsyncIterator[Any]]:
    tracer = trace.get_tracer("gpufair.rpc")

    async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        with tracer.start_as_current_span(method, kind=trace.SpanKind.SERVER):
            try:
                async for item in behavior(request, context):
                    yield item
            except grpc.aio.AbortError:
                raise
            except Exception as exc:  # noqa: BLE001
                await _abort(context, exc)

    return wrapper


class ErrorInterceptor(grpc.aio.ServerInterceptor):
    """Maps exceptions raised by servicers to gRPC statuses."""

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
        return rebuild(handler, lambda behavior, _req, stream: (
            _wrap_stream if stream and inspect.isasyncgenfunction(behavior) else _wrap_unary)(behavior, method))
