"""Cache-specific refinements of the domain errors (they keep their gRPC codes)."""

from __future__ import annotations

from gpufair.common.errors import FailedPrecondition, Unavailable


class IntegrityError(FailedPrecondition):
    """Fetched bytes did not match the object's size or ETag; nothing was served."""


class ObjectChanged(Unavailable):
    """The object was replaced while it was being fetched; retry later."""
