"""Where profiles live: etcd at `profiles/<model>/<gpu_type>`, or memory for tests."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Protocol

import aetcd

from gpufair.client.workloads.record import Profile
from gpufair.common.config import EtcdAuth
from gpufair.common.errors import InvalidArgument, Unavailable
from gpufair.common.keys import Keys

logger = logging.getLogger(__name__)

DEFAULT_ETCD = "127.0.0.1:2379"


class ProfileStore(Protocol):
    """Read and write exclusive-speed profiles."""

    async def put(self, profile: Profile) -> None: ...

    async def get(self, model: str, device_type: str) -> Profile | None: ...

    async def list(self) -> list[Profile]: ...


def _key(keys: Keys, model: str, device_type: str) -> str:
    try:
        return keys.profile(model, device_type)
    except ValueError as e:
        raise InvalidArgument(str(e)) from None


class InMemoryProfileStore:
    """A dict behind the ProfileStore protocol (stores JSON, as etcd does)."""

    def __init__(self, keys: Keys | None = None) -> None:
        self._keys = keys or Keys()
        self._data: dict[str, str] = {}

    async def put(self, profile: Profile) -> None:
        self._data[_key(self._keys, profile.model, profile.device_type)] = profile.to_json()

    async def get(self, model: str, device_type: str) -> Profile | None:
        text = self._data.get(_key(self._keys, model, device_type))
        return None if text is None else Profile.from_json(text)

    async def list(self) -> list[Profile]:
        return [Profile.from_json(v) for _, v in sorted(self._data.items())]


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """"host:port" (an http:// prefix is tolerated) -> (host, port)."""
    text = endpoint.strip().removeprefix("http://").rstrip("/")
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidArgument(f"etcd endpoint {endpoint!r} is not host:port")
    return host, int(port)


class EtcdProfileStore:
    """Profiles in etcd through an aetcd client (the caller owns the client)."""

    def __init__(self, client: aetcd.Client, keys: Keys | None = None) -> None:
        self._client = client
        self._keys = keys or Keys()

    async def put(self, profile: Profile) -> None:
        key = _key(self._keys, profile.model, profile.device_type)
        try:
            await self._client.put(key.encode(), profile.to_json().encode())
        except aetcd.ClientError as e:
            raise Unavailable(f"etcd write of {key} failed: {e}") from None

    async def get(self, model: str, device_type: str) -> Profile | None:
        key = _key(self._keys, model, device_type)
        try:
            kv = await self._client.get(key.encode())
        except aetcd.ClientError as e:
            raise Unavailable(f"etcd read of {key} failed: {e}") from None
        return None if kv is None else Profile.from_json(kv.value)

    async def list(self) -> list[Profile]:
        prefix = self._keys.profiles_prefix()
        try:
            rows = await self._client.get_prefix(prefix.encode())
        except aetcd.ClientError as e:
            raise Unavailable(f"etcd read of {prefix} failed: {e}") from None
        return [Profile.from_json(kv.value) for kv in rows]


@contextlib.asynccontextmanager
async def etcd_profile_store(
    endpoint: str, keys: Keys | None = None, timeout_s: float = 5.0
) -> AsyncIterator[EtcdProfileStore]:
    """Connect to etcd at `endpoint` ("host:port") and yield a profile store."""
    host, port = parse_endpoint(endpoint)
    creds = EtcdAuth.from_env()
    client = aetcd.Client(host, port, timeout=timeout_s, username=creds.username or None, password=creds.password or None)
    try:
        await client.connect()
    except (aetcd.ClientError, OSError) as e:
        raise Unavailable(f"cannot reach etcd at {endpoint}: {e}") from None
    try:
        yield EtcdProfileStore(client, keys)
    finally:
        await client.close()
