"""Domain errors, raised by cores and mapped to gRPC status codes in one place.

Cores raise these; the server interceptor (`gpufair.common.server`) turns them
into statuses and the CLI into exit codes. Messages are shown to users, so they
say what was wrong and never carry tracebacks or secrets.
"""

from __future__ import annotations

import re

#: An echoed value (a quoted string, or an unbroken run of text) longer than
#: this is cut, with a note of its length; a whole message at most MAX_MESSAGE.
MAX_ECHO = 80
MAX_MESSAGE = 1024
_N = MAX_ECHO + 1
_QUOTED = re.compile(rf"'(?:[^'\\\n]|\\.){{{_N},}}'|" + rf'"(?:[^"\\\n]|\\.){{{_N},}}"')
_RUN = re.compile(r"\S{%d,}" % (MAX_ECHO + 41))


def _cut(m: re.Match[str]) -> str:
    text = m.group(0)
    quote = text[0] if text[0] in "'\"" and text[-1] == text[0] else ""
    return f"{text[:MAX_ECHO + len(quote)]}...{quote} ({len(text) - 2 * len(quote)} characters)"


def bounded(message: str) -> str:
    """`message` with every long echoed value cut to MAX_ECHO characters and a
    length note, and the whole at most MAX_MESSAGE: the one place that keeps a
    caller's 20,000-character id out of a status message (a status over gRPC's
    16 KiB metadata limit would reach the caller as RESOURCE_EXHAUSTED instead)."""
    out = _RUN.sub(_cut, _QUOTED.sub(_cut, message))
    return out if len(out) <= MAX_MESSAGE else f"{out[:MAX_MESSAGE]}... (message cut at {MAX_MESSAGE} of {len(out)} characters)"


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
