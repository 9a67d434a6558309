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
from gpufair.common.handlers import Undecodable, rebuild
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
    "/gpufair.scheduler.v1.SchedulerService/RemoveJob": Access.ADMIN,
    "/gpufair.scheduler.v1.SchedulerService/SubmitJob": Access.ADMIN,
    "/gpufair.scheduler.v1.SchedulerService/WithdrawSubmission": Access.ADMIN,
    "/gpufair.scheduler.v1.SchedulerService/GetSubmission": Access.READ,
    "/gpufair.scheduler.v1.SchedulerService/ListQueue": Access.READ,
    "/gpufair.scheduler.v1.SchedulerService/StreamCommands": Access.JOB,
    "/gpufair.scheduler.v1.SchedulerService/ListJobs": Access.READ,
    "/gpufair.scheduler.v1.SchedulerService/GetJob": Access.READ,
    "/gpufair.scheduler.v1.SchedulerService/GetPolicy": Access.READ,
    "/gpufair.scheduler.v1.SchedulerService/SetPolicy": Access.ADMIN,
    "/gpufair.scheduler.v1.SchedulerService/PinSplit": Access.ADMIN,
    "/gpufair.scheduler.v1.SchedulerService/ReleaseSplit": Access.ADMIN,
    "/gpufair.scheduler.v1.SchedulerService/ExplainDecision": Access.READ,
    "/gpufair.scheduler.v1.SchedulerService/PutProfile": Access.ADMIN,
    "/gpufair.scheduler.v1.SchedulerService/GetProfile": Access.READ,
    "/gpufair.scheduler.v1.SchedulerService/ListProfiles": Access.READ,
    "/gpufair.cache.v1.CacheService/Prefetch": Access.ADMIN,
    # Resolve and ReadObject may fetch from S3 with the cache's credentials and
    # fill its capacity, so even with open reads they need a token.
    "/gpufair.cache.v1.CacheService/Resolve": Access.TOKEN,
    "/gpufair.cache.v1.CacheService/ReadObject": Access.TOKEN,
    "/gpufair.cache.v1.CacheService/ListEntries": Access.READ,
    "/gpufair.cache.v1.CacheService/EvictEntry": Access.ADMIN,
    "/gpufair.cache.v1.CacheService/SubmitPipeline": Access.ADMIN,
    "/gpufair.cache.v1.CacheService/GetPlan": Access.READ,
    "/gpufair.cache.v1.CacheService/ListPipelines": Access.READ,
    # A step's recorded durations steer every later plan of its pipeline.
    "/gpufair.cache.v1.CacheService/RecordStepDuration": Access.ADMIN,
    "/gpufair.cache.v1.CacheService/ListClusterEntries": Access.READ,
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


def _deny(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message)

    async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        await context.abort(code, message)
        yield  # pragma: no cover - makes this an async generator

    return rebuild(handler, lambda _behavior, _req, response_stream: stream if response_stream else unary)


def _job_scoped(handler: grpc.RpcMethodHandler, job: str) -> grpc.RpcMethodHandler:
    """Let the call through only for requests that name the token's own job."""

    def refused(request: Any) -> PermissionDenied | None:
        if isinstance(request, Undecodable):
            return None  # names no job: the error interceptor answers INVALID_ARGUMENT
        named = getattr(request, "job_id", None)
        return None if named == job else PermissionDenied(f"a token for job {job!r} cannot act on job {named or ''!r}")

    async def checked_iter(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for r in requests:
            if (exc := refused(r)) is not None:
                raise exc
            yield r

    def make(behavior: Any, request_stream: bool, response_stream: bool) -> Any:
        async def checked(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if request_stream:
                return checked_iter(request)
            if (exc := refused(request)) is not None:
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
            return request

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            return await behavior(await checked(request, context), context)

        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            async for item in behavior(await checked(request, context), context):
                yield item

        return stream if response_stream else unary

    return rebuild(handler, make)


def auth_interceptors(config: CommonConfig) -> list[grpc.aio.ServerInterceptor]:
    """The interceptor list for a service; empty (with a warning) when auth is off."""
    if not config.auth.enabled:
        logger.warning("authentication is off (no GPUFAIR_ADMIN_TOKEN): every caller may do everything")
        return []
    return [AuthInterceptor(config.auth.admin_token, JobTokens(config.auth.job_token_secret), config.auth.open_reads)]
