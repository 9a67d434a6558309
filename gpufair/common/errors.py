"""Domain errors, raised by cores and mapped to gRPC status codes in one place.

Cores raise these; the server interceptor (`gpufair.common.server`) turns them
into statuses and the CLI into exit codes. Messages are shown to users, so they
say what was wrong and never carry tracebacks or secrets.
"""

from __future__ import annotations


class GpufairError(Exception):
    """Base of every error gpufair reports to a caller."""

    #: Name of the grpc.StatusCode this error maps to.
    code_name = "INTERNAL"


class InvalidArgument(GpufairError):
    """The caller sent something malformed or out of range."""

    code_name = "INVALID_ARGUMENT"


class NotFound(GpufairError):
    """A named thing (job, dataset, profile) does not exist."""

    code_name = "NOT_FOUND"


class AlreadyExists(GpufairError):
    """A create collided with an existing thing."""

    code_name = "ALREADY_EXISTS"


class FailedPrecondition(GpufairError):
    """The request is valid but the system is not in a state to do it."""

    code_name = "FAILED_PRECONDITION"


class ResourceExhausted(GpufairError):
    """A capacity limit (cache bytes, queue) would be exceeded."""

    code_name = "RESOURCE_EXHAUSTED"


class Unavailable(GpufairError):
    """A dependency (etcd, S3, another service) cannot be reached; retry later."""

    code_name = "UNAVAILABLE"


class Unauthenticated(GpufairError):
    """No or bad credentials."""

    code_name = "UNAUTHENTICATED"


class PermissionDenied(GpufairError):
    """Credentials are fine but do not allow this action."""

    code_name = "PERMISSION_DENIED"
