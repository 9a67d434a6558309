"""What the services need of their key-value state, as a Protocol (pure).

`gpufair.common.etcd.EtcdState` implements it over etcd; unit tests use the
in-memory `gpufair.common.memstate.MemoryState` behind the same Protocol.
Values are JSON objects; every write reports the store revision it made, so
a caller can wait for a mirror to have seen its own write (patroni's
`KVCache` model) instead of polling.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gpufair.common.errors import FailedPrecondition

Json = dict[str, Any]


class StaleVersion(FailedPrecondition):
    """A versioned write carried a version that is not newer than the stored one."""


@dataclass(frozen=True)
class Stored:
    """A JSON value read from the store with its revisions."""

    value: Json
    mod_revision: int
    create_revision: int


@dataclass(frozen=True)
class WatchEvent:
    """One change under a watched prefix: `value` is None for a delete."""

    key: str
    value: Json | None
    revision: int


class Watch(Protocol):
    """A stream of `WatchEvent`s; `cancel()` ends it."""

    def __aiter__(self) -> AsyncIterator[WatchEvent]: ...

    async def cancel(self) -> None: ...


class StateStore(Protocol):
    """JSON values under string keys, with revisions, transactions, a lease and watches."""

    async def ping(self) -> bool: ...

    async def close(self) -> None: ...

    async def get(self, key: str) -> Stored | None: ...

    async def put(self, key: str, value: Json) -> int: ...

    async def delete(self, key: str) -> int:
        """Delete `key`: the revision of the delete, 0 if there was nothing to delete."""
        ...

    async def delete_prefix(self, prefix: str) -> int:
        """Delete every key under `prefix`: the revision of the delete, 0 if there was nothing to delete."""
        ...

    async def get_prefix(self, prefix: str) -> tuple[dict[str, Stored], int]: ...

    async def create_if_absent(self, key: str, value: Json, *, leased: bool = False) -> int:
        """Create `key` only if absent: the revision of the write, 0 if it existed."""
        ...

    async def put_versioned(self, key: str, value: Json, *, also: Mapping[str, Json] = ...,
                            delete_range: tuple[str, str] | None = None) -> int:
        """In one transaction: `value` (with an int "version" newer than the stored
        one, else StaleVersion), the `also` keys, and a delete of [start, end).
        Returns the revision of the write."""
        ...

    async def delete_if(self, key: str, *, value: Json | None = None, mod_revision: int | None = None) -> bool:
        """Delete `key` only if it still holds `value` / was last written at `mod_revision`."""
        ...

    async def put_live(self, key: str, value: Json) -> None: ...

    async def delete_live(self, key: str, value: Json | None = None) -> bool: ...

    async def watch_prefix(self, prefix: str, start_revision: int) -> Watch: ...
