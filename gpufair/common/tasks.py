"""Waiting for and stopping background work without ever hanging (pure asyncio, no etcd)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from gpufair.common.state import Watch

logger = logging.getLogger(__name__)


async def cancel_watch(watch: Watch, timeout: float = 2.0) -> None:
    """Cancel a watch without ever hanging: aetcd's cancel waits on its watcher's
    stream, which may be stuck when etcd went away or the task is being cancelled."""
    try:
        await asyncio.wait_for(watch.cancel(), timeout)
    except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - best effort; the stream dies with the client
        logger.debug("watch cancel did not complete", exc_info=True)


async def stop_task(task: "asyncio.Task[Any] | None", timeout: float = 5.0) -> None:
    """Cancel a background task and wait for it, but never forever."""
    if task is None:
        return
    task.cancel()
    try:
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), timeout)
    except asyncio.TimeoutError:
        logger.warning("task %s did not stop within %.0fs", task.get_name(), timeout)


async def within(awaitable: Awaitable[Any], timeout: float | None) -> bool:
    """True if `awaitable` (an event's wait, a future) completes within `timeout` seconds."""
    try:
        await asyncio.wait_for(awaitable, timeout)
        return True
    except asyncio.TimeoutError:
        return False
