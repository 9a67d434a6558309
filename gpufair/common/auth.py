"""Authentication and authorisation of every RPC, in one interceptor.

Callers present `authorization: Bearer <token>`:
- the admin token (from a secret) may do everything;
- a job token (`gpufair.common.tokens`, returned by RegisterJob) may act on its
  own job only: stream telemetry and commands, deregister it;
- no token: read-only queries, if GPUFAIR_OPEN_READS is true (the default),
  except those that spend the service's credentials or capacity (the cache's
  Resolve and ReadObject fetch from S3): they need some valid token.
With no admin token configured, authentication is off (local development).
Health and reflection are always open, so probes work.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import grpc

from gpufair.common.config import CommonConfig
from gpufair.common.errors import PermissionDenied
from gpufair.common.tokens import JobTokens

logger = logging.getLogger(__name__)


class Access(Enum):
    OPEN = "open"  # health, reflection
    READ = "read"  # read-only queries
    TOKEN = "token"  # any valid token: reads that spend the service's own credentials or capacity
    JOB = "job"  # a job's own trainers (request carries job_id)
    ADMIN = "admin"  # mutating and admin RPCs


# Every gpufair RPC's class. A method missing here is treated as ADMIN (deny by default).
ACCESS: dict[str, Access] = {
    "/gpufair.metrics.v1.MetricsService/ReportTelemetry": Access.JOB,
    "/gpufair.metrics.v1.MetricsService/GetJobStats": Access.READ,
    "/gpufair.metrics.v1.MetricsService/ListJobStats": Access.READ,
    "/gpufair.metrics.v1.MetricsService/ListDeviceStats": Access.READ,
    "/gpufair.metrics.v1.MetricsService/WatchJobStats": Access.READ,
    "/gpufair.scheduler.v1.SchedulerService/RegisterJob": Access.ADMIN,
    "/gpufair.scheduler.v1.SchedulerService/DeregisterJob": Access.JOB,
    "/gpufair.scheduler.v1.SchedulerService/StreamCommands": Access.JOB,
    "/gpufair.scheduler.v1.SchedulerService/ListJobs": Access.READ,
    "/gpufair.scheduler.v1.SchedulerService/GetJob": Access.READ,
    "/gpufair.scheduler.v1.SchedulerService/GetPolicy": Access.READ,
    "/gpufair.scheduler.v1.SchedulerService/SetPolicy": Access.ADMIN,
    "/gpufair.scheduler.v1.SchedulerService/PinSplit": Access.ADMIN,
    "/gpufair.scheduler.v1.SchedulerService/ReleaseSplit": Access.ADMIN,
    "/gpufair.scheduler.v1.SchedulerService/ExplainDecision": Access.READ,
    "/gpufair.cache.v1.CacheService/Prefetch": Access.ADMIN,
    # Resolve and ReadObject may fetch from S3 with the cache's credentials and
    # fill its capacity, so even with open reads they need a token.
    "/gpufair.cache.v1.CacheService/Resolve": Access.TOKEN,
    "/gpufair.cache.v1.CacheService/ReadObject": Access.TOKEN,
    "/gpufair.cache.v1.CacheService/ListEntries": Access.READ,
    "/gpufair.cache.v1.CacheService/EvictEntry": Access.ADMIN,
    "/gpufair.cache.v1.CacheService/SubmitPipeline": Access.ADMIN,
    "/gpufair.cache.v1.CacheService/GetPlan": Access.READ,
}
_OPEN_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


@dataclass(frozen=True)
class Principal:
    admin: bool = False
    job: str | None = None
    anonymous: bool = True


def _bearer(metadata: Any) -> str:
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
            return value[len("Bearer "):].strip()
    return ""


class AuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, admin_token: str, tokens: JobTokens, open_reads: bool) -> None:
        self._admin, self._tokens, self._open_reads = admin_token, tokens, open_reads

    def _principal(self, token: str) -> Principal | None:
        """None means a token was given but is not valid."""
        if not token:
            return Principal()
        if hmac.compare_digest(token.encode(), self._admin.encode()):
            return Principal(admin=True, anonymous=False)
        job = self._tokens.job_of(token)
        return Principal(job=job, anonymous=False) if job else None

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
                                details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        method = details.method
        if handler is None or method.startswith(_OPEN_PREFIXES):
            return handler
        access = ACCESS.get(method, Access.ADMIN)
        principal = self._principal(_bearer(details.invocation_metadata))
        if principal is None:
            return _deny(handler, grpc.StatusCode.UNAUTHENTICATED, "invalid token")
        if principal.admin or (access is Access.READ and (self._open_reads or not principal.anonymous)):
            return handler
        if access is Access.TOKEN and not principal.anonymous:
            return handler
        if access is Access.JOB and principal.job:
            return _job_scoped(handler, principal.job)
        if principal.anonymous:
            return _deny(handler, grpc.StatusCode.UNAUTHENTICATED, f"{method.rsplit('/', 1)[-1]} needs a bearer token")
        return _deny(handler, grpc.StatusCode.PERMISSION_DENIED, f"this token may not call {method.rsplit('/', 1)[-1]}")


def _kw(handler: grpc.RpcMethodHandler) -> dict[str, Any]:
    return dict(request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer)


def _deny(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message)

    async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        await context.abort(code, message)
        yield  # pragma: no cover - makes this an async generator

    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(unary, **_kw(handler))
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(unary, **_kw(handler))
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(stream, **_kw(handler))
    return grpc.stream_stream_rpc_method_handler(stream, **_kw(handler))


def _check_job(request: Any, job: str) -> None:
    if getattr(request, "job_id", None) != job:
        raise PermissionDenied(f"a token for job {job!r} cannot act on job {getattr(request, 'job_id', '')!r}")


def _job_scoped(handler: grpc.RpcMethodHandler, job: str) -> grpc.RpcMethodHandler:
    """Let the call through only for requests that name the token's own job."""

    async def checked_iter(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for r in requests:
            _check_job(r, job)
            yield r

    if handler.unary_unary:
        async def uu(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if getattr(request, "job_id", None) != job:
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"a token for job {job!r} cannot act on job {request.job_id!r}")
            return await handler.unary_unary(request, context)
        return grpc.unary_unary_rpc_method_handler(uu, **_kw(handler))
    if handler.unary_stream:
        async def us(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            if getattr(request, "job_id", None) != job:
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"a token for job {job!r} cannot act on job {request.job_id!r}")
            async for item in handler.unary_stream(request, context):
                yield item
        return grpc.unary_stream_rpc_method_handler(us, **_kw(handler))
    if handler.stream_stream:
        async def ss(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            async for item in handler.stream_stream(checked_iter(requests), context):
                yield item
        return grpc.stream_stream_rpc_method_handler(ss, **_kw(handler))

    async def su(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
        return await handler.stream_unary(checked_iter(requests), context)
    return grpc.stream_unary_rpc_method_handler(su, **_kw(handler))


def auth_interceptors(config: CommonConfig) -> list[grpc.aio.ServerInterceptor]:
    """The interceptor list for a service; empty (with a warning) when auth is off."""
    if not config.auth.enabled:
        logger.warning("authentication is off (no GPUFAIR_ADMIN_TOKEN): every caller may do everything")
        return []
    return [AuthInterceptor(config.auth.admin_token, JobTokens(config.auth.job_token_secret), config.auth.open_reads)]
