"""etcd state layer: one client and one lease per process (patroni-style).

- `EtcdState` (the `StateStore` Protocol over etcd) wraps one `aetcd.Client`,
  keeps one lease alive, re-binds the process's liveness keys when a lease is
  lost, and maps client errors to `Unavailable`.
- Versioned writes compare-and-swap on the key's mod revision and refuse a
  version that is not newer, so a stale writer can never move a value back;
  each is one transaction, and reports the revision etcd gave it.
- `LeaderElection` owns a key by a create-if-absent transaction under the
  process lease; `PrefixCache` reads a prefix and then watches from that
  revision.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import aetcd
import aetcd.exceptions
import grpc

from gpufair.common.config import EtcdAuth, parse_endpoint
from gpufair.common.errors import Unavailable
from gpufair.common.state import Json, StaleVersion, StateStore, Stored, Watch, WatchEvent
from gpufair.common.tasks import stop_task

__all__ = ["EtcdState", "Json", "StaleVersion", "StateStore", "Stored", "Watch", "WatchEvent", "parse_endpoint"]

logger = logging.getLogger(__name__)

# A mirror's first read returns a whole prefix in one answer: 4,000 jobs x 8
# ranks are ~5 MiB, past gRPC's default 4 MiB receive limit. etcd's own Go
# client sets no practical limit; this one allows 256 MiB.
_CHANNEL_OPTIONS = {"grpc.max_receive_message_length": 256 * 1024 * 1024}


# gRPC core's own INTERNAL status, raised in this client when the socket closes
# under a stream it is sending on (etcd stopped mid-keepalive): the link broke,
# etcd said nothing. etcd's own internal errors carry their text ("etcdserver: ...").
_CORE_INTERNAL = "internal error from core"


def _decode(kv: Any) -> Stored:
    return Stored(json.loads(kv.value), kv.mod_revision, kv.create_revision)


def _encode(value: Json) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def _revision(response: Any) -> int:
    """The revision a write inside a transaction made (its response's header)."""
    kind = response.WhichOneof("response")
    return int(getattr(response, kind).header.revision)


class EtcdState:
    """One etcd client, one kept-alive lease, and the keys bound to it."""

    def __init__(self, endpoint: str, *, lease_ttl: int = 10, timeout: float = 5.0, auth: EtcdAuth | None = None) -> None:
        host, port = parse_endpoint(endpoint)
        self.endpoint = endpoint
        self.lease_ttl = lease_ttl
        creds = auth or EtcdAuth.from_env()
        self._client = aetcd.Client(host=host, port=port, timeout=timeout, username=creds.username or None,
                                    password=creds.password or None, options=_CHANNEL_OPTIONS)
        self._lease: Any = None
        self._lease_lock = asyncio.Lock()  # one grant, however many first callers race
        self._rebind_pending = False
        self._live: dict[str, bytes] = {}
        self._keepalive: asyncio.Task[None] | None = None
        self._closed = False
        self._down_since: float | None = None  # set while etcd does not answer: one log line when lost, one when back

    def _note(self, down: str | None) -> None:
        """Log etcd's state changes, once each: lost (with why), back (after how long)."""
        if down is not None and self._down_since is None:
            self._down_since = time.monotonic()
            logger.warning("etcd at %s is unreachable (%s); retrying in the background", self.endpoint, down[:200])
        elif down is None and self._down_since is not None:
            logger.warning("etcd at %s answers again after %.1fs", self.endpoint, time.monotonic() - self._down_since)
            self._down_since = None

    @property
    def client(self) -> aetcd.Client:
        return self._client

    async def _call(self, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        try:
            return await self._call_once(fn, *args, **kwargs)
        except (aetcd.exceptions.ClientError, grpc.aio.AioRpcError) as exc:  # some aetcd calls let raw gRPC errors through
            text = (exc.details() or "") if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
            if "invalid auth token" not in text.lower():
                raise
            # etcd forgot our token (it expired while idle, or the member restarted):
            # reconnecting logs in again; watches and the lease keepalive re-establish.
            logger.info("etcd auth token expired; logging in again")
            await self._client.close()
            try:
                return await self._call_once(fn, *args, **kwargs)
            except (aetcd.exceptions.ClientError, grpc.aio.AioRpcError) as again:
                raise Unavailable(f"etcd at {self.endpoint} rejected gpufair's login: {again}") from again

    async def _call_once(self, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        try:
            result = await fn(*args, **kwargs)
        except Unavailable as exc:
            self._note(str(exc))
            raise
        except Exception as exc:  # noqa: BLE001 - mapped below; anything else is re-raised as it was
            mapped = self.unavailable(exc)
            if mapped is None:
                raise
            self._note(str(exc))
            raise mapped from exc
        self._note(None)
        return result

    def unavailable(self, exc: BaseException) -> Unavailable | None:
        """`exc` as Unavailable if it means etcd cannot be reached (or refuses our
        credentials); None for anything else (an expired token is handled by `_call`)."""
        if isinstance(exc, (aetcd.exceptions.ConnectionFailedError, aetcd.exceptions.ConnectionTimeoutError)):
            return Unavailable(f"etcd at {self.endpoint} is unreachable: {exc}")
        if isinstance(exc, grpc.aio.AioRpcError):
            if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) or (
                    exc.code() == grpc.StatusCode.INTERNAL and _CORE_INTERNAL in (exc.details() or "").lower()):
                return Unavailable(f"etcd at {self.endpoint} is unreachable: {exc.details()}")
            return None
        if not isinstance(exc, aetcd.exceptions.ClientError):
            return None
        text = str(exc).lower()
        if "unavailable" in text or "connect" in text or _CORE_INTERNAL in text:
            return Unavailable(f"etcd at {self.endpoint} is unreachable: {exc}")
        if "invalid auth token" in text:
            return None  # an expired token: `_call` logs in again
        if isinstance(exc, aetcd.exceptions.UnauthenticatedError) or any(
                w in text for w in ("user name is empty", "permission denied", "authentication failed")):
            # Wrong or missing credentials: the service cannot work until an operator fixes them.
            return Unavailable(f"etcd at {self.endpoint} refused gpufair's credentials "
                               f"(GPUFAIR_ETCD_USERNAME / GPUFAIR_ETCD_PASSWORD_FILE): {exc}")
        return None

    async def ping(self) -> bool:
        """True if etcd answers a read."""
        try:
            await self._call(self._client.get, b"/gpufair-ping")
            return True
        except (Unavailable, aetcd.exceptions.ClientError):
            return False

    async def close(self) -> None:
        """Stop the keepalive, revoke the lease (liveness keys vanish at once), close."""
        self._closed = True
        await stop_task(self._keepalive)
        if self._lease is not None:
            try:
                await asyncio.wait_for(self._client.revoke_lease(self._lease.id), 2)
            except Exception:  # noqa: BLE001 - best effort on shutdown; the TTL cleans up
                logger.debug("lease revoke failed on close", exc_info=True)
        await self._client.close()

    # --- plain JSON values -------------------------------------------------

    async def get(self, key: str) -> Stored | None:
        kv = await self._call(self._client.get, key.encode())
        return None if kv is None else _decode(kv)

    async def put(self, key: str, value: Json) -> int:
        """Write a value; returns the new revision."""
        res = await self._call(self._client.put, key.encode(), _encode(value))
        return int(res.header.revision)

    async def delete(self, key: str) -> int:
        """Delete `key`: the revision of the delete, 0 if there was nothing to delete."""
        res = await self._call(self._client.delete, key.encode())
        return 0 if res is None else int(res.header.revision)

    async def delete_prefix(self, prefix: str) -> int:
        """Delete every key under `prefix`: the revision of the delete, 0 if there was nothing to delete."""
        res = await self._call(self._client.delete_prefix, prefix.encode())
        return int(res.header.revision) if res.deleted else 0

    async def get_prefix(self, prefix: str) -> tuple[dict[str, Stored], int]:
        """All values under a prefix and the revision they were read at."""
        res = await self._call(self._client.get_prefix, prefix.encode())
        return {kv.key.decode(): _decode(kv) for kv in res}, int(res.header.revision)

    # --- transactions ------------------------------------------------------

    async def create_if_absent(self, key: str, value: Json, *, leased: bool = False) -> int:
        """Create `key` only if it does not exist: the revision of the write, 0 if it existed."""
        tx = self._client.transactions
        lease = (await self.lease()) if leased else None
        ok, responses = await self._call(
            self._client.transaction,
            compare=[tx.create(key.encode()) == 0],
            success=[tx.put(key.encode(), _encode(value), lease=lease)],
            failure=[],
        )
        return _revision(responses[0]) if ok else 0

    async def put_versioned(self, key: str, value: Json, *, also: Mapping[str, Json] | None = None,
                            delete_range: tuple[str, str] | None = None, retries: int = 8) -> int:
        """Write `value` (which holds an int "version") only if it is newer, in one
        transaction with the `also` keys and a delete of [start, end).

        Compare-and-swap on the key's mod revision, so a concurrent writer
        cannot slip in between the read and the write. Raises StaleVersion if
        the stored version is >= the new one. Returns the write's revision,
        from the transaction's own answer.
        """
        version = int(value["version"])
        tx = self._client.transactions
        ops = [tx.put(key.encode(), _encode(value))]
        ops += [tx.put(k.encode(), _encode(v)) for k, v in (also or {}).items()]
        if delete_range is not None:
            ops.append(tx.delete(delete_range[0].encode(), delete_range[1].encode()))
        for _ in range(retries):
            current = await self.get(key)
            if current is not None and int(current.value.get("version", -1)) >= version:
                raise StaleVersion(f"{key}: version {version} is not newer than stored {current.value.get('version')}")
            guard = tx.mod(key.encode()) == current.mod_revision if current else tx.create(key.encode()) == 0
            ok, responses = await self._call(self._client.transaction, compare=[guard], success=ops, failure=[])
            if ok:
                return _revision(responses[0])
        raise Unavailable(f"{key}: too much write contention, gave up after {retries} tries")

    async def delete_if(self, key: str, *, value: Json | None = None, mod_revision: int | None = None) -> bool:
        """Delete `key` only if it still holds exactly `value` and/or was last
        written at `mod_revision` (so a newer owner's key is left alone)."""
        tx = self._client.transactions
        compare = []
        if value is not None:
            compare.append(tx.value(key.encode()) == _encode(value))
        if mod_revision is not None:
            compare.append(tx.mod(key.encode()) == mod_revision)
        if not compare:
            raise ValueError("delete_if needs a value or a mod_revision to check")
        ok, _ = await self._call(self._client.transaction, compare=compare, success=[tx.delete(key.encode())], failure=[])
        return bool(ok)

    # --- the process lease and liveness keys -------------------------------

    async def lease(self) -> Any:
        """The process's lease, granted on first use and kept alive in the background."""
        if self._lease is None:
            async with self._lease_lock:
                if self._lease is None:
                    self._lease = await self._call(self._client.lease, self.lease_ttl)
                    self._keepalive = asyncio.create_task(self._keep_alive(), name="etcd-lease-keepalive")
        return self._lease

    async def put_live(self, key: str, value: Json) -> None:
        """Write a liveness key bound to the process lease (gone when the process is)."""
        data = _encode(value)
        self._live[key] = data
        await self._call(self._client.put, key.encode(), data, lease=await self.lease())

    async def delete_live(self, key: str, value: Json | None = None) -> bool:
        """Delete a liveness key; with `value`, only if it still holds exactly that
        (a newer owner's key, written since, is left alone). True if deleted."""
        if value is None:
            self._live.pop(key, None)
            return bool(await self.delete(key))
        if self._live.get(key) == _encode(value):
            self._live.pop(key)
        return await self.delete_if(key, value=value)

    async def _keep_alive(self) -> None:
        period = max(self.lease_ttl / 3, 0.2)
        while not self._closed:
            await asyncio.sleep(period)
            try:
                if self._rebind_pending:
                    await self._rebind()
                    continue
                reply = await self._call(self._client.refresh_lease, self._lease.id)
                if reply is not None and reply.TTL > 0:
                    continue
                logger.warning("etcd lease %x expired; granting a new one", self._lease.id)
                await self._renew_lease()
            except Unavailable:
                logger.debug("lease keepalive: etcd unreachable, will retry")
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the loop must survive anything
                logger.exception("lease keepalive failed")

    async def _renew_lease(self) -> None:
        self._lease = await self._call(self._client.lease, self.lease_ttl)
        self._rebind_pending = True
        await self._rebind()

    async def _rebind(self) -> None:
        """Put every liveness key under the current lease; stays pending until all succeed."""
        for key, data in list(self._live.items()):
            await self._call(self._client.put, key.encode(), data, lease=self._lease)
        self._rebind_pending = False

    async def revoke_lease_for_test(self) -> None:
        """Revoke the lease as a crash would let it expire (fault tests)."""
        if self._lease is not None:
            await self._call(self._client.revoke_lease, self._lease.id)

    # --- watches -------------------------------------------------------------

    async def watch_prefix(self, prefix: str, start_revision: int) -> Watch:
        """`WatchEvent`s under a prefix from a revision (iterate, then `cancel_watch()` it)."""
        return _EtcdWatch(await self._call(self._client.watch_prefix, prefix.encode(), start_revision=start_revision), self)


class _EtcdWatch:
    """An aetcd Watch seen as `WatchEvent`s with decoded JSON values; a lost
    connection ends it with Unavailable, like every other call."""

    def __init__(self, watch: Any, state: EtcdState) -> None:
        self._watch, self._state = watch, state

    async def __aiter__(self) -> AsyncIterator[WatchEvent]:
        try:
            async for event in self._watch:
                value = None if event.kind == "DELETE" else json.loads(event.kv.value)
                yield WatchEvent(event.kv.key.decode(), value, int(event.kv.mod_revision))
        except Exception as exc:  # noqa: BLE001 - mapped, or re-raised as it was
            mapped = self._state.unavailable(exc)
            if mapped is None:
                raise
            self._state._note(str(exc))
            raise mapped from exc

    async def cancel(self) -> None:
        await self._watch.cancel()
